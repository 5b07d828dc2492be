"""A replicator run in a thread of the dashboard's process (``start --tui``, ``demo --tui``).

The replicator installs no signal handlers off the main thread; it is stopped as Ctrl-C
stops ``cdcctl start``: :meth:`engine.Replicator.request_stop`, after which it finishes
and commits the batch in flight. An error that ends the run is kept in :attr:`error`
for the command to report once the dashboard has closed.
"""

from __future__ import annotations

import threading

import engine


class BackgroundReplicator:
    """``replicator.run()`` in a daemon thread."""

    def __init__(self, replicator: engine.Replicator, *, until_caught_up: bool = False) -> None:
        self.replicator = replicator
        self.until_caught_up = until_caught_up
        #: What ended the run, if it did not end cleanly.
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="replicator", daemon=True)

    def _run(self) -> None:
        try:
            self.replicator.run(until_caught_up=self.until_caught_up)
        except BaseException as exc:  # noqa: BLE001 - reported by the command afterwards
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the batch in flight (returns at once; see :meth:`join`)."""
        self.replicator.request_stop()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; whether it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()
