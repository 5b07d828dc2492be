"""Dead letters: undecodable messages, kept with their coordinates and raw bytes.

Nothing is dropped: a message the decoder cannot read is appended (and fsynced) to
``<work_dir>/deadletter/<table>.jsonl`` as ``{"topic", "partition", "offset", "key_b64",
"value_b64", "key", "value", "error", "time"}`` (``key``/``value``: the bytes as text when
they are UTF-8, else null; ``time``: when it was quarantined, ISO-8601 UTC) before the
batch that skips it is committed. A crash before that commit re-reads the batch; the
message is then recognised by its coordinates (a partition's offsets only grow within a
file) and not written twice: exactly one line per bad message, whatever crashes in
between. Files written before ``error`` and ``time`` existed (``reason``) are read too.

The dead-letter file is only ever appended to. Replays (``cdcctl deadletters replay``)
are logged in ``<table>.replays.jsonl``, one line per dead letter tried: ``{"topic",
"partition", "offset", "time", "instant", "error"}`` — ``instant`` the Hudi instant that
applied it, or ``error`` why it still does not decode. A dead letter is *pending* until a
replay line names an instant for it. The replay commit itself lists the coordinates it
applied in its extra metadata (:data:`REPLAYED_KEY`), so a crash between that commit and
the log line is reconciled at the next replay (:meth:`DeadLetters.reconcile`): each dead
letter is applied by a replay exactly once.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.files import private_dir, private_file

if TYPE_CHECKING:
    from engine.decode import BadMessage

#: Commit extra metadata: the dead letters a replay commit applied (``topic:partition:offset``).
REPLAYED_KEY = "cdcctl.replayed"
#: Suffix of a table's replay log next to its dead-letter file.
REPLAYS_SUFFIX = ".replays.jsonl"

Coordinates = tuple[str, int, int]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def coordinates_text(where: Coordinates) -> str:
    """``topic:partition:offset`` (how a replay commit names what it applied)."""
    return f"{where[0]}:{where[1]}:{where[2]}"


def parse_coordinates(text: str) -> Coordinates:
    topic, part, off = text.rsplit(":", 2)
    return topic, int(part), int(off)


@dataclass
class DeadLetter:
    """One quarantined message as its dead-letter file holds it, with its replays."""

    table: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    #: Why it was quarantined (or, after a replay that failed, why it still fails).
    error: str
    #: When it was quarantined (ISO-8601 UTC; None in files written before it existed).
    time: str | None
    #: The Hudi instant of the replay that applied it (None: pending).
    replayed_instant: str | None = None
    #: When it was last replayed (applied or not).
    replayed_at: str | None = None

    @property
    def where(self) -> Coordinates:
        return (self.topic, self.partition, self.offset)

    def record(self) -> dict[str, Any]:
        """What ``cdcctl deadletters --json`` shows of it."""
        return {
            "table": self.table,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "time": self.time,
            "error": self.error,
            "key": _text(self.key),
            "key_b64": base64.b64encode(self.key).decode() if self.key is not None else None,
            "value_b64": base64.b64encode(self.value).decode() if self.value is not None else None,
            "replayed_at": self.replayed_at,
        }


def _lines(path: Path) -> Iterable[dict[str, Any]]:
    """The JSON objects of a JSON-lines file (a line cut short by a crash is skipped)."""
    if not path.is_file():
        return
    with path.open() as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def _bytes(b64: Any) -> bytes | None:
    return None if b64 is None else base64.b64decode(b64)


def _append(path: Path, records: Sequence[dict[str, Any]]) -> None:
    """Append JSON lines durably (after a newline if a crash cut the last line short)."""
    private_dir(path.parent)
    private_file(path)
    with path.open("a+") as fh:
        if fh.tell() > 0:
            fh.seek(fh.tell() - 1)
            if fh.read(1) != "\n":
                fh.write("\n")  # a crash cut the last line short: start a new one
        for record in records:
            fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class DeadLetters:
    """The dead-letter files of one work folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        #: Per table, the highest offset already quarantined per (topic, partition).
        self._written: dict[str, dict[tuple[str, int], int]] = {}

    def path(self, table: str) -> Path:
        """The dead-letter file of a table."""
        return self.folder / f"{table}.jsonl"

    def replays_path(self, table: str) -> Path:
        """The replay log of a table."""
        return self.folder / f"{table}{REPLAYS_SUFFIX}"

    def tables(self) -> list[str]:
        """Tables that have a dead-letter file."""
        if not self.folder.is_dir():
            return []
        return sorted(
            p.name.removesuffix(".jsonl")
            for p in self.folder.glob("*.jsonl")
            if not p.name.endswith(REPLAYS_SUFFIX)
        )

    def _highest(self, table: str) -> dict[tuple[str, int], int]:
        """What the table's file holds already (read once per run)."""
        if table not in self._written:
            highest: dict[tuple[str, int], int] = {}
            for record in _lines(self.path(table)):
                try:
                    where = (str(record["topic"]), int(record["partition"]))
                    offset = int(record["offset"])
                except (ValueError, KeyError, TypeError):
                    continue
                highest[where] = max(offset, highest.get(where, -1))
            self._written[table] = highest
        return self._written[table]

    def quarantine(self, table: str, bad: Sequence[BadMessage]) -> int:
        """Append bad messages not yet in the table's file, durably; return how many."""
        highest = self._highest(table)
        new = [b for b in bad if b.offset > highest.get((b.topic, b.partition), -1)]
        if not new:
            return 0
        now = _now()
        _append(
            self.path(table),
            [
                {
                    "topic": b.topic,
                    "partition": b.partition,
                    "offset": b.offset,
                    "key_b64": base64.b64encode(b.key).decode() if b.key is not None else None,
                    "value_b64": (
                        base64.b64encode(b.value).decode() if b.value is not None else None
                    ),
                    "key": _text(b.key),
                    "value": _text(b.value),
                    "error": b.reason,
                    "time": now,
                }
                for b in new
            ],
        )
        for b in new:
            where = (b.topic, b.partition)
            highest[where] = max(b.offset, highest.get(where, -1))
        return len(new)

    def letters(self, table: str) -> list[DeadLetter]:
        """Every dead letter of a table (pending and replayed), in file order."""
        letters: dict[Coordinates, DeadLetter] = {}
        for r in _lines(self.path(table)):
            try:
                letter = DeadLetter(
                    table,
                    str(r["topic"]),
                    int(r["partition"]),
                    int(r["offset"]),
                    _bytes(r.get("key_b64")),
                    _bytes(r.get("value_b64")),
                    str(r.get("error") or r.get("reason") or ""),
                    r.get("time"),
                )
            except (ValueError, KeyError, TypeError):
                continue
            letters.setdefault(letter.where, letter)
        for r in _lines(self.replays_path(table)):
            try:
                found = letters.get((str(r["topic"]), int(r["partition"]), int(r["offset"])))
            except (ValueError, KeyError, TypeError):
                continue
            if found is None or found.replayed_instant is not None:
                continue
            found.replayed_at = r.get("time")
            if r.get("instant"):
                found.replayed_instant = str(r["instant"])
            elif r.get("error"):
                found.error = str(r["error"])
        return list(letters.values())

    def pending(self, table: str) -> list[DeadLetter]:
        """A table's dead letters no replay has applied, in source order."""
        waiting = [d for d in self.letters(table) if d.replayed_instant is None]
        return sorted(waiting, key=lambda d: (d.topic, d.partition, d.offset))

    def record_replay(
        self,
        table: str,
        applied: Sequence[Coordinates],
        instant: str | None,
        failed: dict[Coordinates, str],
    ) -> None:
        """Log a replay: the letters ``instant`` applied, and those that still fail."""
        now = _now()
        lines = [
            {
                "topic": t,
                "partition": p,
                "offset": o,
                "time": now,
                "instant": instant,
                "error": None,
            }
            for t, p, o in applied
        ]
        lines += [
            {"topic": t, "partition": p, "offset": o, "time": now, "instant": None, "error": e}
            for (t, p, o), e in sorted(failed.items())
        ]
        if lines:
            _append(self.replays_path(table), lines)

    def reconcile(self, table: str, commits: Iterable[tuple[str, dict[str, str]]]) -> int:
        """Log replays that committed but were not logged (a crash in between).

        ``commits``: the table's completed instants with their extra metadata. Returns
        how many dead letters were found applied.
        """
        pending = {d.where for d in self.pending(table)}
        found = 0
        for instant, extra in commits:
            text = extra.get(REPLAYED_KEY)
            if not text:
                continue
            done = [w for w in map(parse_coordinates, json.loads(text)) if w in pending]
            if done:
                self.record_replay(table, done, instant, {})
                pending -= set(done)
                found += len(done)
        return found


@dataclass
class ReplayOutcome:
    """What ``cdcctl deadletters replay`` did for one table."""

    table: str
    #: Dead letters applied, and the Hudi instant that applied them (None: none applied).
    applied: int = 0
    instant: str | None = None
    #: Dead letters that still do not decode, with their new errors.
    failed: dict[Coordinates, str] | None = None
    #: Dead letters at or after the table's checkpoint: the replicator reads them itself.
    waiting: int = 0
    #: Dead letters found applied by an earlier replay that crashed before logging them.
    reconciled: int = 0

    def describe(self) -> str:
        """One line for the user."""
        parts = [
            f"{self.applied} applied" + (f" in instant {self.instant}" if self.instant else "")
        ]
        if self.failed:
            first = next(iter(sorted(self.failed.items())))
            parts.append(
                f"{len(self.failed)} still fail (first: {first[0][0]}[{first[0][1]}] offset "
                f"{first[0][2]}: {first[1]})"
            )
        if self.waiting:
            parts.append(f"{self.waiting} at or after the checkpoint, left to the replicator")
        if self.reconciled:
            parts.append(f"{self.reconciled} found applied by an interrupted replay")
        return ", ".join(parts)
