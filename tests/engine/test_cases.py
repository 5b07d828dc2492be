"""The change-stream corpus (tests/cases/, format in its README): each case is decoded,
applied by the real engine (Spark merge, Hudi writer) and read back by hudi-rs, and the
typed values are asserted.

Types and values are those hudi-rs returns, never cast: a column's type must be its
documented replica type (the case's ``types``, else the type cdcctl records in the
commit, which ``cdcctl query`` uses and must equal it too), or one of the relabellings
of :func:`documented_as`, which docs/guide/types.md "Column types" names.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from engine.config import config_from_dict
from engine.hudi import HOODIE_META_COLUMNS
from engine.playground.registry import SchemaRegistry
from engine.replicator import Replicator
from tests.engine.test_properties import Msg

pytestmark = [pytest.mark.spark]

CASES = Path(__file__).resolve().parent.parent / "cases"
CASE_FILES = sorted(CASES.rglob("*.json"))


def render(value: Any) -> Any:
    """A replica value in the form case files write it (see tests/cases/README.md)."""
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, dict):
        return {k: render(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render(v) for v in value]
    return value


def _payload(msg: dict, part: str) -> bytes | None:
    if f"{part}_b64" in msg:
        return base64.b64decode(msg[f"{part}_b64"])
    if f"{part}_text" in msg:
        return msg[f"{part}_text"].encode()
    value = msg.get(part)
    return None if value is None else json.dumps(value).encode()


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class PartitionedMsg(Msg):
    def __init__(self, topic: str, key: bytes | None, value: bytes | None, offset: int, part: int):
        super().__init__(topic, key, value, offset)
        self._part = part

    def partition(self) -> int:
        return self._part


def run_case(case: dict, tmp_path: Path, spark: Any) -> tuple[Replicator, int]:
    """Apply a case's batches; returns the replicator and the number of bad messages.

    A case with ``"registry"`` (schemas by id) is served by a schema registry started for
    it, whose URL becomes ``source.schema_registry.url``.
    """
    with contextlib.ExitStack() as stack:
        extra: dict = {}
        if "registry" in case:
            registry = stack.enter_context(SchemaRegistry())
            for schema_id, schema in case["registry"].items():
                registry.register(f"case-{schema_id}", schema, int(schema_id))
            extra = {"source": {"schema_registry": {"url": registry.url}}}
        return _run_case(case, extra, tmp_path, spark)


def _run_case(case: dict, extra: dict, tmp_path: Path, spark: Any) -> tuple[Replicator, int]:
    base = {
        "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
        "target": {"path": str(tmp_path / "lake")},
        "hudi": {"num_buckets": 2},
        "replicator": {"work_dir": str(tmp_path / "work")},
    }
    cfg = config_from_dict(_merge(_merge(base, extra), case.get("config", {})))
    replicator = Replicator(cfg, spark=spark)
    offsets: dict[tuple[str, int], int] = {}
    bad = 0
    for batch in case["batches"]:
        records = []
        for msg in batch:
            coord = (msg["topic"], int(msg.get("partition", 0)))
            offset = offsets.get(coord, 0)
            offsets[coord] = offset + 1
            records.append(
                PartitionedMsg(
                    msg["topic"], _payload(msg, "key"), _payload(msg, "value"), offset, coord[1]
                )
            )
        report = replicator.apply(records)
        bad += sum(counts.get("bad", 0) for counts in report.tables.values())
    return replicator, bad


@pytest.mark.parametrize("path", CASE_FILES, ids=[str(p.relative_to(CASES)) for p in CASE_FILES])
def test_case(spark, tmp_path: Path, path: Path) -> None:
    case = json.loads(path.read_text())
    replicator, bad = run_case(case, tmp_path, spark)
    failed = {s.table: s.error or "" for s in replicator.failing()}
    expected_failed = case.get("failed", {})
    assert set(failed) == set(expected_failed), failed
    for table, words in expected_failed.items():
        assert words in failed[table], (table, failed[table])
    assert bad == case.get("bad", 0)
    statuses = {s.table: s for s in replicator.status()}
    if "status_tables" in case:  # exactly these tables (no topic of other records is one)
        assert sorted(statuses) == sorted(case["status_tables"]), sorted(statuses)
    for table, counters in case.get("counters", {}).items():
        got = {name: getattr(statuses[table].counters, name) for name in counters}
        assert got == counters, (table, got)
    lake = tmp_path / "lake"
    tables = sorted(p.name for p in lake.glob("*") if (p / ".hoodie").is_dir())
    assert tables == sorted(case["expect"]), tables
    for table, want in case["expect"].items():
        rows, schema = _read(lake / table, want.get("types", {}))
        if "multiset" in want:
            got = _multiset(rows, _copies(lake / table), want["multiset"])
            assert got == _sorted_rows(want["multiset"]), table
        else:
            assert sorted(rows) == sorted(want["rows"]), (table, sorted(rows))
        for key, columns in want.get("rows", {}).items():
            got = {c: render(rows[key].get(c)) for c in columns}
            assert got == columns, (table, key)
        for column in want.get("types", {}):  # each one's type is checked by _read
            assert column in schema.names, (table, column, "not in the replica")
        for column in want.get("absent", []):
            assert column not in schema.names, (table, column)
            assert all(column not in row for row in rows.values()), (table, column)


def _sorted_rows(rows: list[dict]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


def _copies(path: Path) -> dict[str, int]:
    """``_cdc_copies`` by record key, read by hudi-rs (empty without that column)."""
    import hudi
    import pyarrow as pa

    batches = hudi.HudiTable(str(path)).read()
    if not batches or "_cdc_copies" not in batches[0].schema.names:
        return {}
    table = pa.Table.from_batches(batches)
    keys = table.column("_hoodie_record_key").to_pylist()
    return dict(zip(keys, table.column("_cdc_copies").to_pylist(), strict=True))


def _multiset(rows: dict[str, dict], copies: dict[str, int], want: list[dict]) -> list[str]:
    """The replica's rows as a multiset (a ``keyless = "full-row"`` row counts
    ``_cdc_copies`` times), with the columns the expected rows name."""
    columns = sorted({c for row in want for c in row})
    out = []
    for key, row in rows.items():
        out += [{c: render(row.get(c)) for c in columns}] * copies.get(key, 1)
    return _sorted_rows(out)


def documented_as(raw: pa.DataType) -> list[pa.DataType]:
    """Every documented replica type a column hudi-rs returns as ``raw`` may have.

    The only relabellings allowed (docs/guide/types.md "Column types"), all of the same stored
    values: a naive ``timestamp[us]`` comes back labelled ``tz=UTC`` (hudi-rs reads no
    Avro type as naive; the stored integers are the wall clock), a ``time64[us]`` comes
    back as the ``int64`` of microseconds since midnight it is stored as (Hudi's readers
    accept no Parquet TIME), and a list's element field is named ``element`` (Parquet's
    name) rather than ``item``. (int8/int16 are no relabelling: the decoder already makes
    them ``int32``, their documented type.)
    """
    if pa.types.is_timestamp(raw) and raw.tz == "UTC":
        return [raw, pa.timestamp(raw.unit)]
    if pa.types.is_int64(raw):
        return [raw, pa.time64("us")]
    if pa.types.is_list(raw):
        item = raw.value_field.with_name("item")
        return [pa.list_(item.with_type(t)) for t in documented_as(raw.value_type)]
    if pa.types.is_struct(raw):
        options = [[f.with_type(t) for t in documented_as(f.type)] for f in raw]
        return [pa.struct(list(fields)) for fields in itertools.product(*options)]
    if pa.types.is_map(raw):
        keys, items = documented_as(raw.key_type), documented_as(raw.item_type)
        return [
            pa.map_(raw.key_field.with_type(k), raw.item_field.with_type(i))
            for k, i in itertools.product(keys, items)
        ]
    return [raw]


def _plain(value: Any, documented: pa.DataType) -> Any:
    """A value hudi-rs returned, as its documented type holds it: only a naive timestamp
    read as UTC loses its label (its wall clock is the UTC one); nothing is converted."""
    if value is None:
        return None
    if pa.types.is_timestamp(documented) and documented.tz is None:
        assert value.utcoffset() == dt.timedelta(0), value
        return value.replace(tzinfo=None)
    if pa.types.is_time64(documented):
        return pa.scalar(value, pa.int64()).cast(documented).as_py()
    if pa.types.is_list(documented):
        return [_plain(v, documented.value_type) for v in value]
    if pa.types.is_struct(documented):
        return {f.name: _plain(value[f.name], f.type) for f in documented}
    if pa.types.is_map(documented):
        return [(k, _plain(v, documented.item_type)) for k, v in value]
    return value


def _read(path: Path, types: dict[str, str]) -> tuple[dict[str, dict], pa.Schema]:
    """Rows by record key as hudi-rs returns them (Hudi and cdc columns left out), and the
    schema it returns. Each column's hudi-rs type must read as its documented type (the
    case's ``types``, else the one the commit records); the commit's type must be it too."""
    import hudi

    from engine.hudi.table import HudiTable

    batches = hudi.HudiTable(str(path)).read()
    stored = HudiTable.open(path).arrow_schema()
    if not batches:
        return {}, stored
    table = pa.Table.from_batches(batches)
    data = [
        f.name
        for f in table.schema
        if f.name not in HOODIE_META_COLUMNS and not f.name.startswith("_cdc_")
    ]
    assert sorted(data) == sorted(f.name for f in stored if not f.name.startswith("_cdc_")), (
        path.name, data, stored.names)  # fmt: skip
    documented: dict[str, pa.DataType] = {}
    for name in data:
        want = types.get(name, str(stored.field(name).type))
        assert str(stored.field(name).type) == want, (path.name, name, "recorded in the commit")
        raw = table.schema.field(name).type
        matching = [t for t in documented_as(raw) if str(t) == want]
        assert matching, (path.name, name, f"hudi-rs returns {raw}, documented {want}")
        documented[name] = matching[0]
    rows: dict[str, dict] = {}
    for row in table.to_pylist():
        key = row["_hoodie_record_key"]
        assert key not in rows, f"duplicate live row for key {key} in {path}"
        rows[key] = {name: _plain(row[name], documented[name]) for name in data}
    return rows, table.schema


def test_the_corpus_is_not_empty() -> None:
    # A glob that finds nothing would make the parametrized test vanish silently.
    assert len(CASE_FILES) >= 1
