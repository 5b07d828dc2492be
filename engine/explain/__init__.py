"""``cdcctl explain TABLE KEY...``: one key's whole story, from its topic to its replica row.

Three sources, one timeline per key:

1. **The replica's history** (:func:`engine.hudi.key_history`): the key's row after every
   retained commit that changed it: the instant, the commit's operation, the row's
   source position and op, and for a delete its tombstone's position (a repair's delete
   has sub-position -1, :mod:`engine.replicator.repairs`; a truncate leaves none and the
   commit records its position).
2. **The events still in Kafka** (:mod:`.topic`): a bounded read of the table's topic
   (``since``, ``max_messages``), decoded by the replicator's own decoder.
3. **The dead letters** of the table whose Kafka key is the key (their key is decoded as
   a tombstone's would be: the decoder's own key rules).

Each event is given the commit that consumed it (the first instant whose checkpoint for
the event's partition passes its offset; none yet: ``pending``) and a verdict by the fold
rules of :mod:`engine.merge.rules`, applied to the key's events in consumption order from
the state the key had before the first of them (the replica's version before the commit
that consumed it; nothing when the partition was read from offset 0):

* ``late``: its position is older than the newest one seen for the key (an earlier event,
  the stored row, its tombstone) or not newer than the table's truncate;
* ``replay``: its position equals the newest one seen (Debezium positions name one change;
  an order value equal to one seen is a newer change, ``_cdc_by_field``);
* ``applied`` (``toast-filled`` when columns held Debezium's unavailable-value placeholder
  and took the previous value): it changed the key. When the consuming commit's row holds
  its position it ``wrote`` that version; otherwise a newer event of the same batch won
  (``superseded``);
* a Kafka tombstone (op ``x``) takes the position of the key's event before it in its
  partition: it is the delete itself after an upsert at that position (ExtractNewRecordState's
  drop mode), and repeats the delete otherwise (``tombstone``);
* ``dead-letter``: quarantined (``replayed`` at an instant, or pending).

Events without a position (none inherited) are applied whatever came before, as the fold
applies them. A truncate of the table is an event of every key.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from engine.config import Config
from engine.decode import RecordBatch, decoder_for
from engine.errors import ConfigError
from engine.explain.topic import KAFKA_TS, TopicRead, read_keys
from engine.hudi import HudiView, KeyHistory, KeyVersion, key_history, parse_checkpoint
from engine.hudi.options import CHECKPOINT_KEY, SOURCE_TABLE_KEY
from engine.merge.toast import toast_mask
from engine.model import (
    BY_FIELD,
    COPIES,
    KEY,
    NO_POS,
    OFFSET,
    OP,
    OP_DELETE,
    OP_TOMBSTONE,
    OP_TRUNCATE,
    PARTITION,
    POS,
    POS_SUB,
    SOURCE_TS,
    STREAMED_BIT,
    TX_ID,
)
from engine.naming import table_store, unknown_table
from engine.query import parse_as_of
from engine.replicator.deadletter import DeadLetter
from engine.replicator.progress import TOPIC_KEY, partition_tails, truncate_floor
from engine.replicator.replay import dead_letter_folder
from engine.validate.source import format_lsn

__all__ = ["Explanation", "KeyStory", "explain_keys", "parse_since", "position_text", "record_key"]

_UPSERTS = ("r", "c", "u")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

Position = tuple[int, int]


def parse_since(text: str, now: dt.datetime | None = None) -> int:
    """``--since`` as epoch milliseconds: a duration back from now (``90s``, ``30m``,
    ``2h``, ``7d``), an ISO time (no zone: UTC) or a 17-digit instant.

    Raises:
        ConfigError: it is none of these.
    """
    found = re.fullmatch(r"\s*([0-9]+)\s*([smhd])\s*", text)
    if found:
        now = now or dt.datetime.now(dt.UTC)
        then = now - dt.timedelta(seconds=int(found[1]) * _UNITS[found[2]])
        return int(then.timestamp() * 1000)
    try:
        instant = parse_as_of(text)
    except ConfigError:
        raise ConfigError(
            f"--since {text!r} is neither a duration, an ISO time nor an instant",
            "give 30m, 2h or 7d (back from now), or 2024-05-01T12:00:00Z",
        ) from None
    when = dt.datetime.strptime(instant, "%Y%m%d%H%M%S%f").replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def position_text(connector: str | None, pos: int | None, sub: int | None) -> str:
    """A source position as its database names it (PostgreSQL LSN, MySQL binlog)."""
    if pos is None or pos == NO_POS:
        return "no position"
    streamed, value = bool(pos & STREAMED_BIT), pos & ~STREAMED_BIT
    if connector == "postgresql":
        lsn = sub if sub is not None and sub >= 0 else value
        text = f"LSN {format_lsn(lsn)}"
        if lsn != value:
            text += f" (commit {format_lsn(value)})"
    elif connector in ("mysql", "mariadb"):
        text = f"binlog {value >> 32:06d}:{value & 0xFFFFFFFF}" + (
            f" row {sub}" if sub is not None and sub >= 0 else ""
        )
    else:
        text = f"{value}:{sub}"
    if sub == -1 and streamed:
        text += ", repair"
    return text if streamed else f"snapshot, {text}"


@dataclass
class Event:
    """One event of the key (or a truncate of its table) found in Kafka or dead letters."""

    partition: int
    offset: int
    op: str | None
    position: Position | None
    position_text: str
    source_ts_ms: int | None
    kafka_ts_ms: int | None
    tx_id: str | None
    #: applied, toast-filled, superseded, replay, late, tombstone, dead-letter, pending.
    verdict: str
    #: The commit that consumed it (None: not yet, or before the retained timeline).
    instant: str | None
    #: The replica version it wrote (the consuming commit's row holds its position).
    wrote: bool = False
    #: Columns that held the unavailable-value placeholder.
    toast: list[str] = field(default_factory=list)
    note: str = ""
    row: dict[str, Any] | None = field(default=None, repr=False)


@dataclass
class Change:
    """One retained commit that changed the key's row."""

    instant: str
    action: str
    operation: str | None
    #: insert, update, delete, truncate, repair-delete, or baseline (the row as the
    #: oldest readable instant holds it).
    change: str
    op: str | None
    position: Position | None
    position_text: str
    source_ts_ms: int | None
    #: The Kafka event whose position it holds, when still read: partition, offset, tx id.
    partition: int | None = None
    offset: int | None = None
    tx_id: str | None = None
    row: dict[str, Any] | None = field(default=None, repr=False)


@dataclass
class KeyStory:
    """One key: its row now, its commits, its events, merged into one timeline."""

    key: str
    row: dict[str, Any] | None
    changes: list[Change]
    events: list[Event]
    file_group: str | None
    oldest_readable: str | None
    notes: list[str] = field(default_factory=list)

    def timeline(self) -> list[tuple[str, Change | Event]]:
        """Events and commits in order: each commit after the events it consumed."""
        items: list[tuple[tuple, str, Change | Event]] = []
        for c in self.changes:
            items.append(((c.instant, 1, 0, 0), "commit", c))
        for e in self.events:
            items.append(((e.instant or "~", 0, e.partition, e.offset), "event", e))
        return [(kind, item) for _, kind, item in sorted(items, key=lambda t: t[0])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "row": self.row,
            "file_group": self.file_group,
            "oldest_readable": self.oldest_readable,
            "notes": self.notes,
            "timeline": [{"kind": kind, **asdict(item)} for kind, item in self.timeline()],
        }


@dataclass
class Explanation:
    """``cdcctl explain``'s answer for one table."""

    table: str
    topic: str | None
    source_table: str | None
    table_type: str
    kafka: dict[str, Any]
    keys: list[KeyStory]

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "topic": self.topic,
            "source_table": self.source_table,
            "table_type": self.table_type,
            "kafka": self.kafka,
            "keys": [k.to_dict() for k in self.keys],
        }


# ----------------------------------------------------------------------------- keys


def record_key(given: str, key_fields: list[str]) -> str:
    """The record key meant by ``given``: as stored (``_hoodie_record_key``: the value,
    or ``a:1,b:2`` for a composite key), or a composite key as ``a=1,b=2``."""
    if len(key_fields) > 1 and "=" in given and ":" not in given:
        parts = dict(p.partition("=")[::2] for p in given.split(","))
        if set(parts) == set(key_fields):
            return ",".join(f"{f}:{parts[f]}" for f in key_fields)
    return given


# ----------------------------------------------------------------------------- commits


class _Consumers:
    """Which commit consumed a Kafka record: the first completed instant whose checkpoint
    passes its offset (checkpoints only grow, so a bisect per partition finds it)."""

    def __init__(self, view: HudiView, topic: str | None, extras: dict[str, dict]) -> None:
        self.by_partition: dict[int, tuple[list[int], list[str]]] = {}
        for instant in sorted(extras):
            checkpoint = extras[instant].get(CHECKPOINT_KEY)
            for part, nxt in (parse_checkpoint(checkpoint, topic) if topic else {}).items():
                offsets, instants = self.by_partition.setdefault(part, ([], []))
                if not offsets or nxt > offsets[-1]:
                    offsets.append(nxt)
                    instants.append(instant)
        #: Older commits were archived: the oldest active one may not be the consumer.
        self.archived = view.has_archive()
        self.first = min(extras) if extras else None

    def of(self, partition: int, offset: int) -> str | None:
        found = self.by_partition.get(partition)
        if found is None:
            return None
        at = bisect.bisect_right(found[0], offset)
        return found[1][at] if at < len(found[0]) else None


def _row_position(row: dict[str, Any] | None) -> Position | None:
    if row is None or row.get(POS) is None or row.get(POS) == NO_POS:
        return None
    return int(row[POS]), int(row.get(POS_SUB) or 0)


def _data(row: dict[str, Any] | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {k: v for k, v in row.items() if not k.startswith("_hoodie_") or k.endswith("time")}


def _changes(history: KeyHistory, connector: str | None) -> list[Change]:
    out: list[Change] = []
    before: KeyVersion | None = None
    for v in history.versions:
        pos = _row_position(v.row)
        if v.baseline:
            kind = "baseline"
        elif v.row is not None:
            kind = "insert" if before is None or before.row is None else "update"
            if before is None and not history.complete and v.row.get(OP) == "u":
                kind = "update"
        elif v.tombstone is not None:
            pos = (v.tombstone[0], v.tombstone[1] or 0)
            kind = "repair-delete" if v.tombstone[1] == -1 else "delete"
        elif truncate_floor(v.extra) != (None if before is None else truncate_floor(before.extra)):
            pos, kind = truncate_floor(v.extra), "truncate"
        else:
            kind = "delete"
        source_ts = (
            v.row.get(SOURCE_TS)
            if v.row is not None
            else (v.tombstone[2] if v.tombstone is not None else None)
        )
        out.append(
            Change(
                v.written_at if v.baseline and v.written_at else v.instant,
                v.action,
                v.operation,
                kind,
                None if v.row is None else v.row.get(OP),
                pos,
                "" if pos is None else position_text(connector, *pos),
                source_ts,
                row=_data(v.row),
            )
        )
        before = v
    return out


# ----------------------------------------------------------------------------- verdicts


@dataclass
class _State:
    """The key as the fold sees it: the newest position and whether a row lives."""

    newest: Position | None = None
    live: bool = False
    floor: Position | None = None


def _toast_columns(rows: pa.Table, index: int, placeholder: str) -> list[str]:
    out = []
    for name in rows.column_names:
        if name.startswith("_"):
            continue
        mask = toast_mask(rows.column(name).slice(index, 1), placeholder)
        if mask is not None and mask.to_pylist()[0]:
            out.append(name)
    return out


def _newer(pos: Position, than: Position | None, equal_is_newer: bool) -> bool:
    return than is None or pos > than or (equal_is_newer and pos == than)


class _Before:
    """What the replica knew of the key before a commit: its state (row or tombstone
    position, the table's truncate floor) and each partition's tail."""

    def __init__(self, history: KeyHistory, extras: dict[str, dict]) -> None:
        self.history = history
        self.extras = extras
        self.instants = sorted(extras)

    def _last_before(self, instant: str | None) -> dict[str, str] | None:
        """The extra metadata of the newest commit before ``instant`` (None: after all)."""
        at = bisect.bisect_left(self.instants, instant) if instant else len(self.instants)
        return self.extras[self.instants[at - 1]] if at else None

    def state(self, instant: str | None) -> _State:
        """The key before ``instant`` (None: after the newest commit)."""
        state = _State()
        for v in self.history.versions:
            if instant is not None and v.instant >= instant:
                break
            if v.row is not None:
                state = _State(_row_position(v.row), True)
            elif v.tombstone is not None:
                state = _State((v.tombstone[0], v.tombstone[1] or 0), False)
            else:
                state = _State(state.newest, False)
        extra = self._last_before(instant)
        if extra is not None:
            state.floor = truncate_floor(extra)
        return state

    def tail(self, instant: str | None, partition: int) -> tuple[str, Position] | None:
        """The key and position of the partition's last keyed event before ``instant``."""
        extra = self._last_before(instant)
        try:
            _, key, pos, sub = partition_tails(extra or {})[partition]
        except (KeyError, ValueError, TypeError):
            return None
        return str(key), (int(pos), int(sub or 0))


def _merge(state: _State, known: _State) -> None:
    """Fold into ``state`` what the replica held that the events read did not show (a
    repair's delete, a truncate, a replayed dead letter, events before the read)."""
    if known.newest is not None and (state.newest is None or known.newest > state.newest):
        state.newest, state.live = known.newest, known.live
    if known.floor is not None and (state.floor is None or known.floor > state.floor):
        state.floor = known.floor


def _judge(
    events: list[Event], flags: list[bool], state: _State, before: _Before | None = None
) -> None:
    """Give each event (consumption order) its verdict, by the fold's rules."""
    previous: dict[int, Event] = {}  # the key's event before, per partition
    instant: str | None = None
    for e, by_field in zip(events, flags, strict=True):
        if e.verdict in ("dead-letter", "pending"):
            continue
        if before is not None and e.instant != instant:
            instant = e.instant
            _merge(state, before.state(instant))
        pos = e.position
        prev = previous.get(e.partition)
        if e.op == OP_TRUNCATE:
            if pos is not None and state.floor is not None and pos <= state.floor:
                e.verdict = "replay" if pos == state.floor else "late"
            else:
                e.verdict = "applied"
                if pos is None or state.newest is None or state.newest < pos:
                    state.live = False  # the row was older than the truncate
                state.floor = pos
            continue
        previous[e.partition] = e
        inherited = prev.position if prev is not None else None
        if prev is None and before is not None:  # the partition's tail, as the fold does
            tail = before.tail(e.instant, e.partition)
            inherited = tail[1] if tail is not None and tail[0] == before.history.key else None
        if pos is None and inherited is not None:
            pos = inherited
            if e.op == OP_TOMBSTONE:
                e.position = pos
                e.position_text = prev.position_text if prev is not None else ""
        if e.op == OP_TOMBSTONE:
            after_upsert = (prev is None or prev.op in _UPSERTS) and pos == state.newest
            if pos is None or after_upsert and state.live:
                e.verdict, state.live = "applied", False
                e.note = "the delete itself (the event before it left the row)"
            else:
                e.verdict = "tombstone"
                e.note = "Kafka's tombstone of the delete before it: nothing to do"
            continue
        if pos is not None and state.floor is not None and pos <= state.floor:
            e.verdict, e.note = "late", "not newer than the table's truncate"
            continue
        if pos is None or _newer(pos, state.newest, by_field):
            e.verdict = "toast-filled" if e.toast else "applied"
            if e.toast and not state.live:
                e.verdict = "applied"
                e.note = f"no previous value for {', '.join(e.toast)}: left null"
            if pos is not None:
                state.newest = pos
            state.live = e.op != OP_DELETE
        else:
            e.verdict = "replay" if pos == state.newest else "late"


def _events(
    read: TopicRead | None,
    key: str,
    connector: str | None,
    consumers: _Consumers,
    placeholder: str,
) -> tuple[list[Event], list[bool]]:
    if read is None or read.rows is None:
        return [], []
    rows = read.rows
    keys = rows.column(KEY).to_pylist()
    ops = rows.column(OP).to_pylist()
    wanted = [
        i for i, (k, op) in enumerate(zip(keys, ops, strict=True)) if k == key or op == OP_TRUNCATE
    ]
    by_field = rows.column(BY_FIELD).to_pylist() if BY_FIELD in rows.column_names else None
    events, flags = [], []
    for i in wanted:
        r = {name: rows.column(name)[i].as_py() for name in rows.column_names}
        pos = None if r[POS] is None else (int(r[POS]), int(r[POS_SUB] or 0))
        instant = consumers.of(r[PARTITION], r[OFFSET])
        toast = _toast_columns(rows, i, placeholder) if r[OP] in _UPSERTS else []
        events.append(
            Event(
                r[PARTITION],
                r[OFFSET],
                r[OP],
                pos,
                "" if pos is None else position_text(connector, *pos),
                r.get(SOURCE_TS),
                r.get(KAFKA_TS) if (r.get(KAFKA_TS) or -1) >= 0 else None,
                r.get(TX_ID),
                "pending" if instant is None else "",
                instant,
                toast=toast,
                row=None
                if r[OP] not in _UPSERTS
                else {k: v for k, v in r.items() if not k.startswith("_")},
            )
        )
        flags.append(bool(by_field and by_field[i]))
    return events, flags


def _letters(cfg: Config, table: str, topic: str | None) -> list[tuple[str, DeadLetter]]:
    """The table's dead letters with their record key, read once for every key asked
    (the key alone, by the decoder's own rules: as the tombstone of that key)."""
    letters = dead_letter_folder(cfg).letters(table)
    if not letters:
        return []
    decode = decoder_for(cfg)
    out = []
    for d in letters:
        if d.key is None or (topic and d.topic != topic):
            continue
        result = decode(RecordBatch(d.topic, [d.key], [None], [d.partition], [d.offset]))
        if result.batch is not None and result.batch.num_rows == 1:
            out.append((str(result.batch.column(KEY)[0].as_py()), d))
    return out


def _dead_letters(
    letters: list[tuple[str, DeadLetter]], key: str, consumers: _Consumers
) -> list[Event]:
    """The dead letters of ``key``, each at the commit that skipped it."""
    return [
        Event(
            d.partition, d.offset, None, None, "", None, None, None, "dead-letter",
            consumers.of(d.partition, d.offset),
            note=(f"replayed at {d.replayed_instant}: " if d.replayed_instant else "") + d.error,
        )
        for k, d in letters
        if k == key
    ]  # fmt: skip


def _link(changes: list[Change], events: list[Event], copies: bool = False) -> None:
    """Each commit's event (the last one whose position its row holds) and each applied
    event's commit (``wrote``; ``superseded`` when a newer one of its batch won)."""
    by_instant = {c.instant: c for c in changes}
    applied = [e for e in events if e.verdict in ("applied", "toast-filled") and e.instant]
    for e in reversed(applied):  # equal order values: the later offset won
        c = by_instant.get(e.instant or "")
        if c is None or e.position is None or c.position != e.position or c.partition is not None:
            continue
        if e.op != OP_TOMBSTONE or c.change == "delete":
            e.wrote = True
            c.partition, c.offset, c.tx_id = e.partition, e.offset, e.tx_id
    first_upsert: dict[str, int] = {}
    newest_truncate: dict[str, Position] = {}
    for e in applied:
        if e.op in _UPSERTS:
            first_upsert.setdefault(e.instant or "", e.offset)
        if e.op == OP_TRUNCATE and e.position is not None:
            at = e.instant or ""
            newest_truncate[at] = max(newest_truncate.get(at, e.position), e.position)
    for e in applied:
        if e.wrote or e.op == OP_TRUNCATE or copies:
            continue
        at = e.instant or ""
        if at not in by_instant and e.op in (OP_DELETE, OP_TOMBSTONE):
            e.note = (
                "deleted the row its own batch wrote: no commit shows that row"
                if first_upsert.get(at, e.offset) < e.offset
                else "no row to delete (its tombstone keeps the position)"
            )
            continue
        e.verdict = "superseded"
        truncated = e.position is not None and newest_truncate.get(at, e.position) > e.position
        e.note = "removed by a truncate of its batch" if truncated else "a newer event won"


def _story(
    cfg: Config,
    view: HudiView,
    key: str,
    read: TopicRead | None,
    connector: str | None,
    consumers: _Consumers,
    extras: dict[str, dict],
    letters: list[tuple[str, DeadLetter]],
) -> KeyStory:
    history = key_history(view, key)
    changes = _changes(history, connector)
    dead = _dead_letters(letters, key, consumers)
    quarantined = {(d.partition, d.offset) for d in dead}
    events, flags = _events(read, key, connector, consumers, cfg.source.toast_placeholder)
    # A dead letter that decodes today is still a dead letter: the fold never saw it.
    kept = [i for i, e in enumerate(events) if (e.partition, e.offset) not in quarantined]
    events, flags = [events[i] for i in kept], [flags[i] for i in kept]
    order = sorted(range(len(events)), key=lambda i: _consumption(events[i]))
    events, flags = [events[i] for i in order], [flags[i] for i in order]
    _judge(events, flags, _State(), _Before(history, extras))
    schema = view.arrow_schema()
    _link(changes, events, copies=schema is not None and COPIES in schema.names)
    events = sorted(events + dead, key=_consumption)
    notes: list[str] = []
    if consumers.archived and any(e.instant == consumers.first for e in events):
        notes.append(
            f"older commits are archived: events shown at {consumers.first} (the oldest "
            "active commit) may have been consumed by one of them"
        )
    if read is not None and read.capped:
        notes.append(
            f"the read stopped after {read.scanned} messages: older or newer events "
            "may be missing (narrow it with --since, or raise --max-messages)"
        )
    row = _data(history.current)
    return KeyStory(key, row, changes, events, history.file_group, history.oldest_readable, notes)


def _consumption(e: Event) -> tuple[str, int, int]:
    """The order the replicator consumed events in: by commit, then partition and offset."""
    return (e.instant or "~", e.partition, e.offset)


def explain_keys(
    cfg: Config,
    table: str,
    keys: list[str],
    *,
    since_ms: int | None = None,
    max_messages: int = 100_000,
) -> Explanation:
    """The story of each of ``keys`` in replica ``table`` (module docstring).

    Raises:
        UnknownTableError: no replica of that name.
        SourceError: the broker does not answer (``max_messages`` 0 reads nothing).
    """
    target = cfg.target_store(patient=False)
    names = HudiView.tables_under(target)
    if table not in names:
        raise unknown_table(table, names)
    view = HudiView.open(table_store(target, table))
    extras = {i: view.extra_metadata(i) for i in view.completed_instants()}
    newest = extras[max(extras)] if extras else {}
    topic = newest.get(TOPIC_KEY) or None
    source = _source_table(newest.get(SOURCE_TABLE_KEY))
    connector = source.get("connector")
    for k in keys:
        try:
            k.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"key {k!r} is not UTF-8 text", "record keys are text: give the key as stored"
            ) from None
    wanted = [record_key(k, view.record_key_fields) for k in keys]
    read = None
    if topic is not None and max_messages > 0:
        read = read_keys(
            cfg, topic, wanted, decoder_for(cfg), since_ms=since_ms, max_messages=max_messages
        )
    consumers = _Consumers(view, topic, extras)
    letters = _letters(cfg, table, topic)
    stories = [_story(cfg, view, k, read, connector, consumers, extras, letters) for k in wanted]
    kafka: dict[str, Any] = {"read": read is not None}
    if read is not None:
        kafka.update(
            {
                "messages": read.scanned,
                "capped": read.capped,
                "partitions": {str(p): list(r) for p, r in read.ranges.items()},
            }
        )
    named = ".".join(source[k] for k in ("db", "schema", "table") if source.get(k)) or None
    return Explanation(table, topic, named, view.table_type, kafka, stories)


def _source_table(text: str | None) -> dict[str, str]:
    try:
        loaded = json.loads(text or "{}")
    except ValueError:
        return {}
    return (
        {k: str(v) for k, v in loaded.items() if isinstance(v, str)}
        if isinstance(loaded, dict)
        else {}
    )
