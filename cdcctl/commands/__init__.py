"""One module per command; each registers its function on the app in :mod:`cdcctl.main`."""
