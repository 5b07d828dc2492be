"""OpenLineage events of real replicator runs (real broker, Spark), received by a real HTTP
endpoint and checked against the OpenLineage model: a table created, a column added, a
column dropped at the source and kept, a table that fails; never one event per batch."""

from __future__ import annotations

import json
import re
import threading
import typing
import uuid
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attr
import jsonschema
import pytest
from openlineage.client.generated import (
    column_lineage_dataset,
    error_message_run,
    job_type_job,
    lifecycle_state_change_dataset,
    processing_engine_run,
    schema_dataset,
    storage_dataset,
    tags_job,
    tags_run,
)

from engine.config import config_from_dict
from engine.lineage import FACET_SCHEMA, PRODUCER
from engine.playground.broker import produce_messages
from engine.replicator import Replicator
from tests import builders

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

V1 = [("id", "int32"), ("name", "string"), ("qty", "int32")]
V2 = [*V1, ("color", "string")]
V3 = [("id", "int32"), ("name", "string"), ("color", "string")]  # qty dropped at the source
BAD = [("id", "int32"), ("name", "string"), ("color", "int32")]  # color: string -> int


class Receiver:
    """An HTTP endpoint that keeps what is POSTed to it (as Marquez's API receives it)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, str], dict]] = []
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path, dict(self.headers), json.loads(body)))
                self.send_response(201)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


# ------------------------------------------------------------------ the OpenLineage model

#: Facet name -> the class openlineage-python generates from the spec for it.
FACETS = {
    "schema": schema_dataset.SchemaDatasetFacet,
    "columnLineage": column_lineage_dataset.ColumnLineageDatasetFacet,
    "storage": storage_dataset.StorageDatasetFacet,
    "lifecycleStateChange": lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet,
    "processing_engine": processing_engine_run.ProcessingEngineRunFacet,
    "errorMessage": error_message_run.ErrorMessageRunFacet,
    "jobType": job_type_job.JobTypeJobFacet,
    # openlineage-python's client adds these itself.
    "tags": tags_run.TagsRunFacet,
}
JOB_FACETS = {"tags": tags_job.TagsJobFacet}
_FACET_KEYS = {"_producer", "_schemaURL", "_deleted"}
#: cdcctl's own facet, as its published schema (docs/lineage/) defines it (its part past
#: the spec's DatasetFacet, which ``_check`` covers for the others).
OWN_FACET = json.loads(
    (
        Path(__file__).parents[2] / "docs" / "lineage" / "CdcctlSchemaChangeDatasetFacet.json"
    ).read_text()
)["$defs"]["CdcctlSchemaChangeDatasetFacet"]["allOf"][1]


def _check(value: Any, typ: Any, where: str) -> None:
    """``value`` (JSON) has the shape of ``typ`` (a generated class or a type hint)."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return
        typ = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(typ), typing.get_args(typ)
    if origin is list:
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _check(item, args[0], f"{where}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), where
        for k, item in value.items():
            _check(item, args[1], f"{where}.{k}")
    elif attr.has(typ):
        assert isinstance(value, dict), where
        hints = typing.get_type_hints(typ)
        known = {a.name for a in attr.fields(typ)}
        assert set(value) <= known | _FACET_KEYS, (where, set(value) - known)
        for a in attr.fields(typ):
            if a.default is attr.NOTHING and a.name not in ("producer",):
                assert a.name in value, (where, a.name)
            if a.name in value:
                _check(value[a.name], hints[a.name], f"{where}.{a.name}")
    elif isinstance(typ, type) and issubclass(typ, __import__("enum").Enum):
        assert value in {m.value for m in typ}, (where, value)
    elif typ is str:
        assert isinstance(value, str), where
    elif typ is bool:
        assert isinstance(value, bool), where
    elif typ is int:
        assert isinstance(value, int), where


def check_event(event: dict) -> None:
    """One RunEvent as the OpenLineage model (openlineage-python's generated classes, made
    from the spec) defines it: required members, types, enums; each facet its class's
    members only and its ``_schemaURL``."""
    assert event["schemaURL"].startswith("https://openlineage.io/spec/")
    assert event["eventType"] in {"START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"}
    datetime.fromisoformat(event["eventTime"].replace("Z", "+00:00"))
    uuid.UUID(event["run"]["runId"])
    assert event["producer"].startswith("https://")
    assert event["job"]["namespace"] and event["job"]["name"]
    places = [("run", event["run"]), ("job", event["job"])]
    places += [(f"inputs[{i}]", d) for i, d in enumerate(event["inputs"])]
    places += [(f"outputs[{i}]", d) for i, d in enumerate(event["outputs"])]
    for where, holder in places:
        for name, facet in (holder.get("facets") or {}).items():
            assert facet["_producer"] == PRODUCER, (where, name)
            cls = (JOB_FACETS if where == "job" else {}).get(name) or FACETS.get(name)
            if cls is None:  # cdcctl's own: a name of its own, its own published schema
                assert name == "cdcctl_schemaChange", (where, name)
                assert facet["_schemaURL"] == FACET_SCHEMA
                jsonschema.validate(facet, OWN_FACET)
                continue
            assert facet["_schemaURL"] == cls._get_schema(), (where, name)
            _check(facet, cls, f"{where}.facets.{name}")


# ------------------------------------------------------------------ the runs


def test_runs_send_start_schema_changes_and_ends_to_an_http_endpoint(
    broker, spark, topic_prefix, tmp_path: Path, monkeypatch
) -> None:
    receiver = Receiver()
    monkeypatch.setenv("CDCCTL_TEST_LINEAGE_TOKEN", "s3cr3t-token")
    topic = f"{topic_prefix}.app.items"
    broker.create_topics([topic])
    cfg = config_from_dict(
        {
            "source": {
                "bootstrap_servers": broker.bootstrap_servers,
                "topics": f"^{re.escape(topic_prefix)}\\.",
                "schema_changes": "keep",
            },
            "target": {"path": str(tmp_path / "lake")},
            "hudi": {"num_buckets": 2},
            "replicator": {"work_dir": str(tmp_path / "work"), "max_batch_events": 20},
            "lineage": {
                "url": receiver.url,
                "namespace": "shop-replicas",
                "api_key": "${env:CDCCTL_TEST_LINEAGE_TOKEN}",
            },
        }
    )
    lsn = 100

    def events(cols: list, ids: range, **row: Any) -> list:
        nonlocal lsn
        out = []
        for i in ids:
            lsn += 1
            after = {"id": i, "name": f"n{i}", **{c: i for c, t in cols if t == "int32"}}
            after.update({c: v for c, v in row.items() if c in dict(cols)})
            out.append((topic, builders.key(i), builders.value("c", lsn, after, cols)))
        return out

    try:
        # 1. Created (60 events: three batches, one START); 2. a column added;
        # 3. qty dropped at the source, kept; 4. color becomes an int: the table fails.
        for n, (cols, ids, row) in enumerate(
            [
                (V1, range(1, 61), {}),
                (V2, range(61, 81), {"color": "red"}),
                (V3, range(81, 91), {"color": "blue"}),
                (BAD, range(91, 93), {"color": 7}),
            ]
        ):
            produce_messages(broker.bootstrap_servers, events(cols, ids, **row))
            Replicator(cfg, spark=spark).run(until_caught_up=True)
            assert len({p[2]["run"]["runId"] for p in receiver.posts}) == n + 1
    finally:
        receiver.close()

    posts = receiver.posts
    assert {path for path, _, _ in posts} == {"/api/v1/lineage"}
    assert {h["Authorization"] for _, h, _ in posts} == {"Bearer s3cr3t-token"}
    sent = [body for _, _, body in posts]
    for event in sent:
        check_event(event)
    kinds = [e["eventType"] for e in sent]
    assert kinds == ["START", "COMPLETE", "START", "RUNNING", "COMPLETE", "START", "RUNNING",
                     "COMPLETE", "START", "FAIL"], kinds  # fmt: skip
    assert {e["job"]["namespace"] for e in sent} == {"shop-replicas"}
    assert {e["job"]["name"] for e in sent} == {"cdcctl.app_items"}

    def out(e: dict) -> dict:
        return e["outputs"][0]["facets"]

    # Created: the replica named as a file path, its schema and where each column is from.
    first = sent[0]
    assert out(first)["lifecycleStateChange"]["lifecycleStateChange"] == "CREATE"
    assert first["outputs"][0] == {**first["outputs"][0], "namespace": "file",
                                   "name": str(tmp_path / "lake" / "app_items")}  # fmt: skip
    assert [(i["namespace"], i["name"]) for i in first["inputs"]] == [
        (f"kafka://{broker.bootstrap_servers}", topic),
        (f"debezium://{topic_prefix}", "app.items"),
    ]
    columns = [f["name"] for f in out(first)["schema"]["fields"]]
    assert columns[:3] == ["id", "name", "qty"] and "_cdc_pos" in columns
    lineage = out(first)["columnLineage"]["fields"]
    assert lineage["id"]["inputFields"][0]["field"] == "id"
    assert "primary-key column" in lineage["id"]["transformationDescription"]
    assert lineage["qty"]["transformationType"] == "IDENTITY"
    assert "stored as int32" in lineage["qty"]["transformationDescription"]
    assert {f["field"] for f in lineage["_cdc_source_ts_ms"]["inputFields"]} == {"source.ts_ms"}
    # A column added: RUNNING with ALTER, the new column in the schema.
    added = sent[3]
    assert out(added)["lifecycleStateChange"]["lifecycleStateChange"] == "ALTER"
    assert "color" in [f["name"] for f in out(added)["schema"]["fields"]]
    assert out(added)["cdcctl_schemaChange"]["instant"]
    # Dropped at the source, kept: said in its transformation.
    kept = sent[6]
    assert out(kept)["cdcctl_schemaChange"]["kept"] == ["qty"]
    assert (
        "dropped at the source"
        in out(kept)["columnLineage"]["fields"]["qty"]["transformationDescription"]
    )
    assert (
        out(kept)["columnLineage"]["fields"]["qty"]["inputFields"][0]["transformations"][0][
            "subtype"
        ]
        == "TRANSFORMATION"
    )
    # The failed table: FAIL with its error.
    failed = sent[-1]
    assert "color" in failed["run"]["facets"]["errorMessage"]["message"]
    assert (
        not (tmp_path / "work" / "cdcctl.log").exists()
        or "s3cr3t" not in (tmp_path / "work" / "cdcctl.log").read_text()
    )
