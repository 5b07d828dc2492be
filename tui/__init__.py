"""The live dashboard (Textual) over a work folder's replicator state.

``cdcctl dashboard`` runs :class:`tui.app.DashboardApp` on a work folder; ``cdcctl start
--tui`` and ``cdcctl demo --tui`` run it with the replicator in a background thread of
the same process (:mod:`tui.background`). Everything the dashboard knows comes from the
engine's public API (``engine/__init__.py``) through :class:`tui.source.StatusSource`.
"""
