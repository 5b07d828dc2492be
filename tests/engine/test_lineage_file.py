"""``[lineage] file``: the events of a run appended to a file, one JSON document a line;
the settings refused before anything runs; an endpoint that does not answer never stops
the run."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pyarrow as pa
import pytest

from engine.config import config_from_dict
from engine.errors import ConfigError
from engine.lineage import Lineage, TableLineage

SCHEMA = pa.schema([("id", pa.int32()), ("note", pa.string()), ("_cdc_pos", pa.int64())])


def _cfg(tmp_path: Path, **lineage) -> object:
    return config_from_dict(
        {
            "source": {
                "bootstrap_servers": "127.0.0.1:9092",
                "topics": "x",
                "database_dsn": "mysql://cdc@db.internal/shop",
            },
            "target": {"path": str(tmp_path / "lake")},
            "lineage": lineage,
            "base_dir": str(tmp_path),
        }
    )


def _table(name: str, **kw) -> TableLineage:
    source = {"connector": "mysql", "db": "shop", "table": name}
    topic = f"srv.shop.{name}"
    return TableLineage(name, topic, source, SCHEMA, ["id"], location=f"/l/{name}", **kw)


def _never() -> TableLineage:
    raise AssertionError("a started table is described by its run")


def test_a_run_appends_its_events_to_the_file(tmp_path: Path) -> None:
    lineage = Lineage.from_config(_cfg(tmp_path, file="lineage/events.jsonl"))
    assert lineage is not None
    lineage.committed(_table("orders"), instant="1", created=True, schema_changed=False, notes=[])
    lineage.committed(_table("orders"), instant="2", created=False, schema_changed=False, notes=[])
    renamed = _table("orders", renamed={"remark": "note"})
    lineage.committed(renamed, instant="3", created=False, schema_changed=True, notes=["renamed"])
    lineage.committed(renamed, instant="5", created=True, schema_changed=False, notes=[])
    lineage.committed(_table("items"), instant="4", created=False, schema_changed=False, notes=[])
    # Nothing said of the source table, a one-part topic (flattened events): still named.
    bare = TableLineage("flat", "flat", {}, SCHEMA, ["id"], location="/l/flat")
    lineage.committed(bare, instant="6", created=False, schema_changed=False, notes=[])
    lineage.failed_table("items", "column 'id' changed from int32 to string", _never)
    lineage.failed_table("items", "told once", _never)
    lineage.failed_table("gone", "failed before any commit, nothing known", lambda: None)
    lineage.close()
    lines = (tmp_path / "lineage" / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [
        ("cdcctl.orders", "START"),
        ("cdcctl.orders", "RUNNING"),
        ("cdcctl.orders", "RUNNING"),  # rebuilt (a live resync): OVERWRITE
        ("cdcctl.items", "START"),
        ("cdcctl.flat", "START"),
        ("cdcctl.items", "FAIL"),
        ("cdcctl.orders", "COMPLETE"),
        ("cdcctl.flat", "COMPLETE"),
    ]
    start, alter = events[0], events[1]
    assert start["outputs"][0]["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    # MySQL: the DSN's host and default port, db.table; no TOAST fill for MySQL.
    assert start["inputs"][1]["namespace"] == "mysql://db.internal:3306"
    assert start["inputs"][1]["name"] == "shop.orders"
    note = start["outputs"][0]["facets"]["columnLineage"]["fields"]["note"]
    assert note["transformationType"] == "IDENTITY" and "TOAST" not in str(note)
    # The rename: the replica column from the source's old name.
    note = alter["outputs"][0]["facets"]["columnLineage"]["fields"]["note"]
    assert note["inputFields"][0]["field"] == "note"  # the source's column is renamed too
    assert "renamed at the source from remark" in note["transformationDescription"]
    rebuilt = events[2]["outputs"][0]["facets"]["lifecycleStateChange"]["lifecycleStateChange"]
    assert rebuilt == "OVERWRITE"
    assert events[5]["run"]["facets"]["errorMessage"]["message"].startswith("column 'id'")
    assert events[4]["inputs"][1]["name"] == "flat"
    assert len({e["run"]["runId"] for e in events}) == 3


def test_an_endpoint_that_does_not_answer_never_stops_the_run(tmp_path: Path, caplog) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _cfg(tmp_path, url=f"http://127.0.0.1:{port}", timeout_seconds=0.5)
    lineage = Lineage.from_config(cfg)
    assert lineage is not None
    started = time.monotonic()
    lineage.committed(_table("orders"), instant="1", created=True, schema_changed=False, notes=[])
    assert time.monotonic() - started < 0.5  # queued, not sent by the caller
    lineage.close()
    assert lineage.failed >= 1 and lineage.sent == 0
    assert "lineage: an event could not be sent" in caplog.text


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"url": "http://a:5000", "file": "x.jsonl"}, "set one"),
        ({"url": "http://user:pw@a:5000"}, "credentials must not be in the URL"),
        ({"url": "http://a:5000", "api_key": "plain-token"}, "must not be in the file"),
        ({"file": "x.jsonl", "api_key": "${env:T}"}, "api_key is for url"),
        ({"url": "ftp://a"}, "not an http:// or https:// URL"),
    ],
)
def test_bad_settings_are_refused_before_anything_runs(tmp_path: Path, settings, said) -> None:
    with pytest.raises(ConfigError, match="lineage") as refused:
        _cfg(tmp_path, **settings)
    assert said in str(refused.value)


def test_no_url_and_no_file_is_no_lineage(tmp_path: Path) -> None:
    assert Lineage.from_config(_cfg(tmp_path)) is None
