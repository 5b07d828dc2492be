"""Dead letters: undecodable messages, kept with their coordinates and raw bytes.

Nothing is dropped: a message the decoder cannot read is appended (and fsynced) to
``<work_dir>/deadletter/<table>.jsonl`` as ``{"topic", "partition", "offset", "reason",
"key_b64", "value_b64"}`` before the batch that skips it is committed. A crash before
that commit re-reads the batch; the message is then recognised by its coordinates (a
partition's offsets only grow within a file) and not written twice: exactly one line
per bad message, whatever crashes in between.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from pathlib import Path

from engine.decode import BadMessage


class DeadLetters:
    """The dead-letter files of one work folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        #: Per table, the highest offset already quarantined per (topic, partition).
        self._written: dict[str, dict[tuple[str, int], int]] = {}

    def path(self, table: str) -> Path:
        """The dead-letter file of a table."""
        return self.folder / f"{table}.jsonl"

    def _highest(self, table: str) -> dict[tuple[str, int], int]:
        """What the table's file holds already (read once per run)."""
        if table not in self._written:
            highest: dict[tuple[str, int], int] = {}
            path = self.path(table)
            if path.is_file():
                with path.open() as fh:
                    for line in fh:
                        try:
                            record = json.loads(line)
                            where = (str(record["topic"]), int(record["partition"]))
                            offset = int(record["offset"])
                        except (ValueError, KeyError, TypeError):
                            continue  # a line cut short by a crash mid-write
                        highest[where] = max(offset, highest.get(where, -1))
            self._written[table] = highest
        return self._written[table]

    def quarantine(self, table: str, bad: Sequence[BadMessage]) -> int:
        """Append bad messages not yet in the table's file, durably; return how many."""
        highest = self._highest(table)
        new = [b for b in bad if b.offset > highest.get((b.topic, b.partition), -1)]
        if not new:
            return 0
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(table)
        with path.open("a+") as fh:
            if fh.tell() > 0:
                fh.seek(fh.tell() - 1)
                if fh.read(1) != "\n":
                    fh.write("\n")  # a crash cut the last line short: start a new one
            for b in new:
                record = {
                    "topic": b.topic,
                    "partition": b.partition,
                    "offset": b.offset,
                    "reason": b.reason,
                    "key_b64": base64.b64encode(b.key).decode() if b.key else None,
                    "value_b64": base64.b64encode(b.value).decode() if b.value else None,
                }
                fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        for b in new:
            where = (b.topic, b.partition)
            highest[where] = max(b.offset, highest.get(where, -1))
        return len(new)
