"""Schema changes seen in events (PostgreSQL has no DDL topic) end to end, per
``schema_changes`` / ``fill_defaults``: a real broker, `cdcctl start` in a child process,
replicas read back by hudi-rs and judged against the oracle (tests/oracle.py) with the
policy's documented effect on top of it."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from engine.playground.broker import produce_messages
from tests.integration.replicas import read_replica, run_cli, status_tables, write_config
from tests.oracle import fold
from tests.schema_events import decimal_field, event, field

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

# Before: id, a text, b bigint, n numeric(10,2). After `DROP COLUMN a`, `ALTER b TYPE
# integer`, `ALTER n TYPE numeric(8,2)` and `ADD COLUMN d integer DEFAULT 42`.
OLD = [field("id", "int32", optional=False), field("a", "string"), field("b", "int64"),
       decimal_field("n", 10, 2)]  # fmt: skip
NEW = [field("id", "int32", optional=False), field("b", "int32"), decimal_field("n", 8, 2),
       field("d", "int32", default=42)]  # fmt: skip
KIND = [field("id", "int32", optional=False), field("b", "string"), decimal_field("n", 8, 2),
        field("d", "int32", default=42)]  # fmt: skip


def _first(topic: str) -> list:
    return [
        event(topic, OLD, "r", {"id": i, "a": f"a{i}", "b": 10 * i, "n": "AJY="}, 100 + i)
        for i in (1, 2, 3)
    ]


def _second(topic: str) -> list:
    return [
        # In the same batch: a change from before the drop, then changes after it.
        event(topic, OLD, "u", {"id": 3, "a": "a3'", "b": 33, "n": "AJY="}, 200),
        event(topic, NEW, "u", {"id": 1, "b": 11, "n": "AJY=", "d": 7}, 300),
        event(topic, NEW, "c", {"id": 4, "b": 40, "n": None, "d": 42}, 310),
    ]


def _run(
    tmp_path: Path,
    broker,
    topic: str,
    source: dict,
    batches: list[list],
    table_type: str = "MERGE_ON_READ",
) -> tuple:
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic)}$",
        target,
        source=source,
        hudi={"table_type": table_type},
    )
    broker.create_topics([topic])
    runs = []
    for batch in batches:
        produce_messages(broker.bootstrap_servers, batch, create_topics=False)
        runs.append(run_cli("start", "--config", str(config), "--until-caught-up"))
    name = "public_" + topic.rsplit(".", 1)[-1]
    return config, target / name, name, runs


def _expected(messages: list, columns: list[str], fill: dict | None = None) -> dict:
    """The oracle's rows, spread over the replica's columns: a column an event did not
    carry is null (kept after a drop, or added after the row was written) unless
    ``fill`` gives the default a row written before the column was added shows."""
    (rows,) = fold(messages).values()
    out = {}
    for key, row in rows.items():
        out[key] = {c: row.get(c, (fill or {}).get(c)) for c in columns}
    return out


def test_keep_keeps_dropped_column_and_wider_type(broker, topic_prefix: str, tmp_path) -> None:
    topic = f"{topic_prefix}.public.keep"
    first, second = _first(topic), _second(topic)
    config, path, name, runs = _run(tmp_path, broker, topic, {}, [first, second])
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-3000:]
    expected = _expected(first + second, ["id", "a", "b", "n", "d"])
    assert read_replica(path) == expected
    assert expected["2"]["a"] == "a2" and expected["1"]["a"] is None  # kept / null after
    assert expected["2"]["d"] is None  # a row from before the ADD: NULL, not the default
    from engine.hudi.table import HudiTable

    types = {f.name: str(f.type) for f in HudiTable.open(path).arrow_schema()}
    assert types["b"] == "int64" and types["n"] == "decimal128(10, 2)"  # wider kept
    log = (tmp_path / "work" / "cdcctl.log").read_text()
    assert "column(s) a no longer in the source: kept in the replica" in log
    assert "column d added in the source with DEFAULT 42: rows stored before it read NULL" in log
    # Judged in the batch it happened in, though its older events read ``b`` as int64.
    assert "column b int64->int32 narrowed in the source" in log
    shown = run_cli("status", "--config", str(config))
    assert "kept in the replica" in shown.stdout and "DEFAULT 42" in shown.stdout, shown.stdout
    assert status_tables(config)[name]["state"] == "STOPPED"
    # Noted once: not again with the next batches (of only narrower rows).
    third = []
    for lsn in (320, 330):
        more = [event(topic, NEW, "u", {"id": 4, "b": lsn, "n": None, "d": 42}, lsn)]
        produce_messages(broker.bootstrap_servers, more, create_topics=False)
        run = run_cli("start", "--config", str(config), "--until-caught-up")
        assert run.returncode == 0, run.stderr[-3000:]
        third += more
    log = (tmp_path / "work" / "cdcctl.log").read_text()
    assert log.count("column b int64->int32 narrowed") == 1
    assert log.count("column n decimal128(10, 2)->decimal128(8, 2) narrowed") == 1
    assert log.count("column(s) a no longer in the source") == 1
    expected = _expected(first + second + third, ["id", "a", "b", "n", "d"])
    assert read_replica(path) == expected

    # A change of kind stops the table under every policy, naming the column and types.
    produce_messages(
        broker.bootstrap_servers,
        [event(topic, KIND, "u", {"id": 2, "b": "two", "n": None, "d": 1}, 400)],
        create_topics=False,
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 3
    state = status_tables(config)[name]
    assert state["state"] == "FAILED"
    assert "column 'b' changed from int64 to string" in state["last_error"]
    assert read_replica(path) == expected


def test_apply_removes_dropped_column(broker, topic_prefix: str, tmp_path) -> None:
    topic = f"{topic_prefix}.public.apply"
    first, second = _first(topic), _second(topic)
    settings = {"schema_changes": "apply"}
    _, path, _, runs = _run(tmp_path, broker, topic, settings, [first, second])
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-3000:]
    assert read_replica(path) == _expected(first + second, ["id", "b", "n", "d"])
    from engine.hudi.table import HudiTable

    assert "a" not in HudiTable.open(path).arrow_schema().names
    # A connector restarted after a crash sends older events again, with the schema they
    # had (``a``, no ``d``): they lose as late events, and neither bring ``a`` back nor
    # make ``d`` look dropped.
    again = [first[1], second[0]]
    produce_messages(broker.bootstrap_servers, again, create_topics=False)
    run = run_cli("start", "--config", str(tmp_path / "cdcctl.toml"), "--until-caught-up")
    assert run.returncode == 0, run.stderr[-3000:]
    assert read_replica(path) == _expected(first + second + again, ["id", "b", "n", "d"])
    names = HudiTable.open(path).arrow_schema().names
    assert "a" not in names and "d" in names


def test_fail_stops_the_table_at_the_drop(broker, topic_prefix: str, tmp_path) -> None:
    topic = f"{topic_prefix}.public.fail"
    first, second = _first(topic), _second(topic)
    settings = {"schema_changes": "fail"}
    config, path, name, runs = _run(tmp_path, broker, topic, settings, [first, second])
    assert runs[0].returncode == 0 and runs[1].returncode == 3, runs[1].stderr[-3000:]
    state = status_tables(config)[name]
    assert state["state"] == "FAILED"
    assert "column(s) a no longer in the source's events" in state["last_error"]
    assert read_replica(path) == _expected(first, ["id", "a", "b", "n"])
    # The operator chooses to keep it: the batch is read again and applies.
    write_config(
        config,
        broker.bootstrap_servers,
        f"^{re.escape(topic)}$",
        tmp_path / "lake",
        source={"schema_changes": "keep"},
        hudi={"table_type": "MERGE_ON_READ"},
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr[-3000:]
    assert read_replica(path) == _expected(first + second, ["id", "a", "b", "n", "d"])


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_fill_defaults_sets_rows_from_before_the_column(
    broker, topic_prefix, tmp_path, table_type
) -> None:
    topic = f"{topic_prefix}.public.fill"
    first, second = _first(topic), _second(topic)
    settings = {"fill_defaults": True}
    # A change stored on its own before the column is added (a log file under MOR).
    middle = [event(topic, OLD, "u", {"id": 2, "a": "a2", "b": 21, "n": None}, 150)]
    config, path, name, runs = _run(
        tmp_path, broker, topic, settings, [first, middle, second], table_type=table_type
    )
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-3000:]
    first += middle
    expected = _expected(first + second, ["id", "a", "b", "n", "d"], fill={"d": 42})
    assert expected["2"]["d"] == 42 and expected["3"]["d"] == 42 and expected["1"]["d"] == 7
    assert read_replica(path) == expected
    assert read_replica(path)["3"]["n"] == Decimal("1.50")
    assert "rows stored before it are set to it" in (tmp_path / "work" / "cdcctl.log").read_text()
    shown = run_cli("status", "--config", str(config))
    assert "column d added in the source with DEFAULT 42" in shown.stdout, shown.stdout
    assert status_tables(config)[name]["state"] == "STOPPED"


def test_avro_events_apply_and_fill_defaults(broker, topic_prefix: str, tmp_path) -> None:
    """The same changes as AvroConverter output (tests/avro_support.py): the writer
    schemas say which columns the source has and carry the default."""
    from engine.playground.registry import SchemaRegistry
    from tests.avro_support import JsonToAvro

    topic = f"{topic_prefix}.public.avro"
    first, second = _first(topic), _second(topic)
    with SchemaRegistry() as registry:
        convert = JsonToAvro(registry.url)
        batches = [[convert.message(*m) for m in b] for b in (first, second)]
        settings = {
            "format": "debezium-avro",
            "schema_changes": "apply",
            "fill_defaults": True,
            "schema_registry": {"url": registry.url},
        }
        config, path, _, runs = _run(tmp_path, broker, topic, settings, batches[:0])
        for batch in batches:
            produce_messages(broker.bootstrap_servers, batch, create_topics=False)
            run = run_cli("start", "--config", str(config), "--until-caught-up")
            assert run.returncode == 0, run.stderr[-3000:]
    expected = _expected(first + second, ["id", "b", "n", "d"], fill={"d": 42})
    assert expected["2"]["d"] == 42
    assert read_replica(path) == expected


def test_kept_column_added_again_and_late_old_events_get_the_default(
    broker, topic_prefix: str, tmp_path
) -> None:
    """Under ``keep`` with ``fill_defaults``: a dropped column added again is a new column
    (the rows held lose their pre-drop values for its DEFAULT), and an event from before
    the ADD read in a later run (after a restart) gets the remembered DEFAULT too."""
    topic = f"{topic_prefix}.public.readd"
    with_d = [field("id", "int32", optional=False), field("d", "int32")]
    no_d = [field("id", "int32", optional=False)]
    readded = [field("id", "int32", optional=False), field("d", "int32", default=42)]
    first = [event(topic, with_d, "r", {"id": i, "d": 7}, 100 + i) for i in (1, 2, 3)]
    dropped = [event(topic, no_d, "u", {"id": 2}, 200)]  # DROP COLUMN d; UPDATE row 2
    added = [event(topic, readded, "c", {"id": 4, "d": 9}, 300)]  # ADD COLUMN d DEFAULT 42
    late = [event(topic, no_d, "c", {"id": 5}, 250)]  # inserted before the ADD, read late
    settings = {"schema_changes": "keep", "fill_defaults": True}
    config, path, name, runs = _run(
        tmp_path, broker, topic, settings, [first, dropped, added, late]
    )
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-3000:]
    expected = _expected(first + dropped + added + late, ["id", "d"])
    assert expected["1"]["d"] == 7 and expected["5"]["d"] is None  # the oracle's fold
    for key in ("1", "2", "3", "5"):  # rows whose last event predates the ADD: the default
        expected[key]["d"] = 42
    assert read_replica(path) == expected
    assert status_tables(config)[name]["state"] == "STOPPED"
    assert (
        "column d added in the source with DEFAULT 42"
        in (tmp_path / "work" / "cdcctl.log").read_text()
    )


def test_a_replayed_dead_letter_from_before_the_add_gets_the_default(
    broker, topic_prefix: str, tmp_path
) -> None:
    """A message from before ``ADD COLUMN d ... DEFAULT 42`` that was a dead letter (too
    large for ``max_message_bytes``) and is replayed after the column was filled gets the
    default, as the rows stored before it did (``fill_defaults``)."""
    topic = f"{topic_prefix}.public.late"
    old = [field("id", "int32", optional=False), field("a", "string")]
    new = [*old, field("d", "int32", default=42)]
    first = [event(topic, old, "c", {"id": 1, "a": "x"}, 100)]
    big = [event(topic, old, "c", {"id": 2, "a": "y" * 3000}, 110)]  # the dead letter
    after = [event(topic, new, "c", {"id": 3, "a": "z", "d": None}, 300)]  # explicit NULL
    limit = max(len(k) + len(v) for _, k, v in first + after) + 100
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "cdcctl.toml", broker.bootstrap_servers, f"^{re.escape(topic)}$", target,
        tolerance="all", source={"fill_defaults": True, "max_message_bytes": limit},
    )  # fmt: skip
    broker.create_topics([topic])
    produce_messages(broker.bootstrap_servers, first, create_topics=False)
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr[-3000:]
    produce_messages(broker.bootstrap_servers, big + after, create_topics=False)
    run = run_cli("start", "--config", str(config), "--until-caught-up")
    assert run.returncode == 0, run.stderr[-3000:]
    path = target / "public_late"
    assert read_replica(path) == {
        "1": {"id": 1, "a": "x", "d": 42}, "3": {"id": 3, "a": "z", "d": None}
    }  # fmt: skip
    config.write_text(config.read_text().replace(f"max_message_bytes = {limit}", ""))
    replay = run_cli("deadletters", "replay", "public_late", "--config", str(config))
    assert replay.returncode == 0 and "1 applied" in replay.stdout, replay.stderr[-3000:]
    expected = _expected(first + big + after, ["id", "a", "d"])
    expected["1"]["d"] = expected["2"]["d"] = 42  # from before the ADD: the default
    assert read_replica(path) == expected
