"""Dead letters: undecodable messages, kept with their coordinates and raw bytes.

Nothing is dropped: a message the decoder cannot read is appended (and fsynced) to
``<work_dir>/deadletter/<table>.jsonl`` as ``{"topic", "partition", "offset", "reason",
"key_b64", "value_b64"}`` before the batch that skips it is committed. A crash before
that commit re-reads the batch and quarantines the message again (a duplicate line,
never a loss).
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

    def path(self, table: str) -> Path:
        """The dead-letter file of a table."""
        return self.folder / f"{table}.jsonl"

    def quarantine(self, table: str, bad: Sequence[BadMessage]) -> Path:
        """Append bad messages to the table's file, durably; return the file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(table)
        with path.open("a") as fh:
            for b in bad:
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
        return path
