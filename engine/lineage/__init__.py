"""OpenLineage events: each table's run, its schema and where each of its columns comes from.

With ``[lineage] url`` (an OpenLineage HTTP endpoint such as Marquez's) or ``file`` (one
JSON event per line), the replicator emits, per table — the job ``<namespace>`` /
``cdcctl.<table>``, one OpenLineage run per replicator run — and never per batch:

* ``START`` at the table's first commit of the run, with ``lifecycleStateChange =
  CREATE`` on the replica when that commit created it;
* ``RUNNING`` with ``lifecycleStateChange = ALTER`` at a commit that changed its schema
  (the notes of the change in the facet ``cdcctl_schemaChange``), ``OVERWRITE`` at the
  first commit of a replica rebuilt during the run (a live resync);
* ``FAIL`` when the table stops (``FAILED``), with the error, and for every started table
  when the run ends with an error; ``COMPLETE`` for the others when the run ends.

Each event names two inputs, the Kafka topic (``kafka://<first broker>``, the topic) and
the source table (``postgres://host:port`` or ``mysql://host:port`` from
``source.database_dsn``, else ``<connector>://<topic prefix>``; ``db.schema.table`` or
``db.table``), and one output, the replica (``file`` and its absolute path, or
``s3://<bucket>`` and its key prefix), with the schema facet (every column and its
type), the storage facet (Hudi, Parquet) and the column-lineage facet: each replica column
from its source column or event field, with the transformation it went through (the
type it is stored as, the record key, the TOAST fill of PostgreSQL's unavailable values,
a column dropped at the source and kept, a rename), and the ``_cdc_*`` columns from the
change event's own fields.

Sending never slows or stops replication: events go through a queue to one background
thread (openlineage-python's transports); a failed send is logged (once per run, then
every hundredth) and counted, and the run's end waits at most a few timeouts for the
queue to drain.
"""

from __future__ import annotations

import datetime as dt
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa

from engine.config import Config
from engine.model import REPLICA_CDC_COLUMNS, ROW_OP, ROW_POS, ROW_POS_SUB, ROW_SOURCE_TS
from engine.redaction import redact
from engine.validate.replica import source_from_topic

log = logging.getLogger("cdcctl.lineage")

#: ``producer`` of every event and facet (a URI, as the spec wants).
PRODUCER = "https://github.com/cdcctl/cdcctl"
#: The JSON Schema of cdcctl's own facet (docs/lineage/), as ``_schemaURL`` wants it.
FACET_SCHEMA = (
    PRODUCER + "/blob/main/docs/lineage/CdcctlSchemaChangeDatasetFacet.json"
    "#/$defs/CdcctlSchemaChangeDatasetFacet"
)
_SCHEMES = {"postgresql": "postgres", "postgres": "postgres", "mysql": "mysql", "mariadb": "mysql"}
_MYSQL = ("mysql", "mariadb")
#: Where each ``_cdc_*`` column of a replica comes from in the change event, by connector
#: (``""``: not known).
_CDC_SOURCES: dict[str, dict[str, tuple[list[str], str]]] = {
    "postgresql": {
        ROW_POS: (["source.sequence", "source.lsn"], "the commit LSN (source.sequence)"),
        ROW_POS_SUB: (["source.lsn"], "the event's own LSN"),
    },
    "mysql": {
        ROW_POS: (["source.file", "source.pos"], "the binlog file and offset"),
        ROW_POS_SUB: (["source.row"], "the row within the binlog event"),
    },
    "": {
        ROW_POS: (["source"], "the source position"),
        ROW_POS_SUB: (["source"], "the position within it"),
    },
}
_CDC_COMMON = {
    ROW_OP: (["op"], "the event's op (r, c, u, d)"),
    ROW_SOURCE_TS: (["source.ts_ms"], "the source database's commit time (ms)"),
}


@dataclass
class TableLineage:
    """What one table's events say of it."""

    table: str
    topic: str
    #: ``connector``, ``db``, ``schema``, ``table`` as the events named the source table.
    source_table: dict[str, str]
    #: The replica's columns as committed (no Hudi meta columns).
    schema: pa.Schema
    key_fields: list[str]
    #: Columns the source dropped that the replica keeps.
    kept: list[str] = field(default_factory=list)
    #: Column renames applied, old -> new.
    renamed: dict[str, str] = field(default_factory=dict)
    #: The store's URL (a folder's path, or ``s3://bucket/prefix/table``).
    location: str = ""


def _dsn_namespace(dsn: str | None) -> tuple[str, str] | None:
    """(scheme, host:port) of the source database's DSN."""
    if not dsn:
        return None
    parts = urlsplit(dsn)
    scheme = _SCHEMES.get(parts.scheme.split("+")[0])
    if scheme is None or not parts.hostname:
        return None
    default = 5432 if scheme == "postgres" else 3306
    return scheme, f"{parts.hostname}:{parts.port or default}"


def source_dataset(cfg: Config, info: TableLineage) -> tuple[str, str]:
    """(namespace, name) of the source table, by OpenLineage's naming conventions."""
    src = info.source_table
    connector = src.get("connector", "")
    mysql = connector in _MYSQL
    if "table" not in src:  # the events did not say: Debezium's topic naming does
        named = source_from_topic(info.topic, info.table)
        wanted = ("db", "table") if mysql else ("schema", "table")
        src = {**src, **{k: named[k] for k in wanted if named.get(k)}}
    parts = [src.get("db"), src.get("table")] if mysql else [
        src.get("db"), src.get("schema"), src.get("table")
    ]  # fmt: skip
    name = ".".join(p for p in parts if p) or info.topic
    found = _dsn_namespace(cfg.source.database.database_dsn)
    if found is not None:
        return f"{found[0]}://{found[1]}", name
    scheme = "mysql" if mysql else ("postgres" if connector == "postgresql" else connector)
    prefix = info.topic.split(".")[0]
    return f"{scheme or 'debezium'}://{prefix}", name


def topic_dataset(cfg: Config, topic: str) -> tuple[str, str]:
    first = cfg.source.kafka.bootstrap_servers.split(",")[0].strip()
    return f"kafka://{first}", topic


def replica_dataset(location: str) -> tuple[str, str]:
    if location[:5].lower() == "s3://":
        bucket, _, key = location[5:].partition("/")
        return f"s3://{bucket}", key
    return "file", location


def _toastable(t: pa.DataType) -> bool:
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_list(t)
    )


def column_lineage(
    cfg: Config, info: TableLineage
) -> dict[str, tuple[list[tuple], str, str | None]]:
    """Replica column -> (its inputs as (namespace, name, field, transformation type,
    subtype, description), the transformation's description, its type)."""
    src_ns, src_name = source_dataset(cfg, info)
    topic_ns, topic_name = topic_dataset(cfg, info.topic)
    postgres = info.source_table.get("connector") == "postgresql"
    old_name = {new: old for old, new in info.renamed.items()}
    connector = info.source_table.get("connector", "")
    kind = "mysql" if connector in _MYSQL else connector
    cdc = {**_CDC_COMMON, **_CDC_SOURCES.get(kind, _CDC_SOURCES[""])}
    out: dict[str, tuple[list[tuple], str, str | None]] = {}
    for f in info.schema:
        if f.name in cdc:
            fields, what = cdc[f.name]
            inputs = [(topic_ns, topic_name, e, "DIRECT", "TRANSFORMATION", what) for e in fields]
            out[f.name] = (inputs, f"{what}, stored as {f.type}", None)
            continue
        if f.name in REPLICA_CDC_COLUMNS or f.name.startswith("_cdc_"):
            continue
        notes = [f"Debezium's value of the column, stored as {f.type}"]
        changed = False  # a value that is not the event's own value of the column
        if f.name in info.key_fields:
            notes.append("a primary-key column: part of the record key")
        if postgres and _toastable(f.type):
            notes.append(
                "an unchanged TOASTed value (Debezium's unavailable-value placeholder) "
                "keeps the replica's previous value"
            )
            changed = True
        if f.name in old_name:  # the source's column has the new name too
            notes.append(f"renamed at the source from {old_name[f.name]}")
        if f.name in info.kept:
            notes.append("dropped at the source: kept with its last values")
            changed = True
        description = "; ".join(notes)
        subtype = "TRANSFORMATION" if changed else "IDENTITY"
        inputs = [(src_ns, src_name, f.name, "DIRECT", subtype, description)]
        out[f.name] = (inputs, description, None if changed else "IDENTITY")
    return out


# ----------------------------------------------------------------------------- events


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_event(
    cfg: Config,
    info: TableLineage,
    run_id: str,
    event_type: str,
    *,
    lifecycle: str | None = None,
    error: str | None = None,
    notes: list[str] | None = None,
    instant: str | None = None,
) -> Any:
    """One OpenLineage ``RunEvent`` of a table's run."""
    from openlineage.client.event_v2 import (
        InputDataset,
        Job,
        OutputDataset,
        Run,
        RunEvent,
        RunState,
    )
    from openlineage.client.generated import (
        column_lineage_dataset as cl,
    )
    from openlineage.client.generated import (
        error_message_run,
        job_type_job,
        lifecycle_state_change_dataset,
        processing_engine_run,
        schema_dataset,
        storage_dataset,
    )
    from openlineage.client.generated.base import set_producer

    set_producer(PRODUCER)  # every facet's _producer is cdcctl, not the client library
    src_ns, src_name = source_dataset(cfg, info)
    topic_ns, topic_name = topic_dataset(cfg, info.topic)
    out_ns, out_name = replica_dataset(info.location)
    data = [f for f in info.schema if not f.name.startswith("_cdc_") and f.name not in info.kept]
    source_schema = schema_dataset.SchemaDatasetFacet(
        fields=[schema_dataset.SchemaDatasetFacetFields(name=f.name) for f in data]
    )
    replica_fields = []
    for f in info.schema:
        described = "primary key" if f.name in info.key_fields else None
        if f.name.startswith("_cdc_"):
            described = "cdcctl: from the change event"
        replica_fields.append(
            schema_dataset.SchemaDatasetFacetFields(
                name=f.name, type=str(f.type), description=described
            )
        )
    lineage = {
        column: cl.Fields(
            inputFields=[
                cl.InputField(
                    namespace=ns, name=name, field=fld,
                    transformations=[cl.Transformation(type=t, subtype=st, description=d,
                                                       masking=False)],
                )
                for ns, name, fld, t, st, d in inputs
            ],
            transformationDescription=description,
            transformationType=kind,
        )
        for column, (inputs, description, kind) in column_lineage(cfg, info).items()
    }  # fmt: skip
    out_facets: dict[str, Any] = {
        "schema": schema_dataset.SchemaDatasetFacet(fields=replica_fields),
        "columnLineage": cl.ColumnLineageDatasetFacet(fields=lineage),
        "storage": storage_dataset.StorageDatasetFacet(storageLayer="hudi", fileFormat="parquet"),
    }
    if lifecycle is not None:
        state = lifecycle_state_change_dataset.LifecycleStateChange[lifecycle]
        out_facets["lifecycleStateChange"] = (
            lifecycle_state_change_dataset.LifecycleStateChangeDatasetFacet(
                lifecycleStateChange=state
            )
        )
    if notes is not None:
        out_facets["cdcctl_schemaChange"] = _custom(
            {"instant": instant, "notes": notes, "renamed": info.renamed, "kept": info.kept}
        )
    run_facets: dict[str, Any] = {
        "processing_engine": processing_engine_run.ProcessingEngineRunFacet(
            version=_version("cdcctl"),
            name="cdcctl",
            openlineageAdapterVersion=_version("openlineage-python"),
        )
    }
    if error is not None:
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=redact(error), programmingLanguage="python"
        )
    job_facets: dict[str, Any] = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="STREAMING", integration="CDCCTL", jobType="CDC_REPLICATION"
        )
    }
    return RunEvent(
        eventType=RunState[event_type],
        eventTime=_now(),
        producer=PRODUCER,
        run=Run(runId=run_id, facets=run_facets),
        job=Job(namespace=cfg.lineage.namespace, name=f"cdcctl.{info.table}", facets=job_facets),
        inputs=[
            InputDataset(namespace=topic_ns, name=topic_name),
            InputDataset(namespace=src_ns, name=src_name, facets={"schema": source_schema}),
        ],
        outputs=[OutputDataset(namespace=out_ns, name=out_name, facets=out_facets)],
    )


def _run_id() -> str:
    """A new run id (openlineage-python's: a UUIDv7, ordered by time)."""
    from openlineage.client.uuid import generate_new_uuid

    return str(generate_new_uuid())


def _custom(values: dict[str, Any]) -> Any:
    """A cdcctl facet (``_producer``, ``_schemaURL`` and the values)."""
    from openlineage.client.generated.base import DatasetFacet

    facet: Any = DatasetFacet(producer=PRODUCER).with_additional_properties(**values)
    facet._schemaURL = FACET_SCHEMA  # noqa: SLF001 - a custom facet names its own schema
    return facet


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


# ----------------------------------------------------------------------------- sending


class Lineage:
    """The replicator's lineage: per table its run, and the thread that sends events."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.sent = 0
        self.failed = 0
        self._runs: dict[str, tuple[str, TableLineage]] = {}
        #: Tables whose run failed (told once).
        self._failed: set[str] = set()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._client = _client(cfg)
        self._thread = threading.Thread(target=self._send_all, name="lineage", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(cls, cfg: Config) -> Lineage | None:
        """The lineage of a run, None when ``[lineage]`` sets no url and no file."""
        return cls(cfg) if cfg.lineage.enabled else None

    def committed(
        self,
        info: TableLineage,
        *,
        instant: str,
        created: bool,
        schema_changed: bool,
        notes: list[str],
    ) -> None:
        """A table committed: START at its first commit of the run, RUNNING on a
        schema change or a rebuild. Never raises: lineage never stops replication."""
        try:
            self._committed(info, instant, created, schema_changed, notes)
        except Exception:  # noqa: BLE001 - said, and replication goes on
            log.warning("lineage: no event for %s's commit %s", info.table, instant, exc_info=True)

    def _committed(
        self, info: TableLineage, instant: str, created: bool, schema_changed: bool, notes: list
    ) -> None:
        started = self._runs.get(info.table)
        self._failed.discard(info.table)  # resumed after a failure: a new run
        if started is None:
            run_id = _run_id()
            self._put(build_event(self.cfg, info, run_id, "START",
                                  lifecycle="CREATE" if created else None))  # fmt: skip
        else:
            run_id = started[0]
        self._runs[info.table] = (run_id, info)
        if started is not None and created:  # rebuilt during the run (a live resync)
            self._put(build_event(self.cfg, info, run_id, "RUNNING", lifecycle="OVERWRITE"))
        elif (schema_changed or notes) and not created:  # notes: e.g. a column dropped, kept
            self._put(build_event(self.cfg, info, run_id, "RUNNING", lifecycle="ALTER",
                                  notes=notes, instant=instant))  # fmt: skip

    def live(self, table: str) -> bool:
        """Whether the table's failure is still to be told."""
        return table not in self._failed

    def failed_table(
        self, table: str, error: str, describe: Callable[[], TableLineage | None]
    ) -> None:
        """A table stopped (FAILED): its run fails, once. A table that failed before its
        first commit of the run starts its run here, described by ``describe()`` (None:
        nothing known of it, no event). Never raises."""
        if not self.live(table):
            return
        self._failed.add(table)
        try:
            started = self._runs.pop(table, None)
            if started is None:
                info = describe()
                if info is None:
                    return
                run_id = _run_id()
                self._put(build_event(self.cfg, info, run_id, "START"))
            else:
                run_id, info = started
            self._put(build_event(self.cfg, info, run_id, "FAIL", error=error))
        except Exception:  # noqa: BLE001 - said, and replication goes on
            log.warning("lineage: no event for %s's failure", table, exc_info=True)

    def close(self, error: str | None = None) -> None:
        """The run ended: COMPLETE (FAIL with ``error``) for each started table, then
        wait for the queue to drain (three timeouts an event, 30 s at most). Never raises."""
        try:
            for run_id, info in self._runs.values():
                kind = "FAIL" if error else "COMPLETE"
                self._put(build_event(self.cfg, info, run_id, kind, error=error))
        except Exception:  # noqa: BLE001 - said; the run's end goes on
            log.warning("lineage: no event for the run's end", exc_info=True)
        self._runs.clear()
        waiting = self._queue.qsize()
        self._queue.put(None)
        self._thread.join(min(30.0, self.cfg.lineage.timeout_seconds * 3 * max(1, waiting)))
        if self._thread.is_alive():
            log.warning("lineage: %d event(s) not sent when the run ended", self._queue.qsize())
        log.info("lineage: %d event(s) sent, %d could not be sent", self.sent, self.failed)

    def _put(self, event: Any) -> None:
        self._queue.put(event)

    def _send_all(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            try:
                self._client.emit(event)
                self.sent += 1
            except Exception as exc:  # noqa: BLE001 - lineage never stops replication
                self.failed += 1
                if self.failed == 1 or self.failed % 100 == 0:
                    log.warning(
                        "lineage: an event could not be sent (%d so far): %s", self.failed, exc
                    )


def _client(cfg: Config) -> Any:
    from openlineage.client import OpenLineageClient

    lc = cfg.lineage
    if lc.url is not None:
        from openlineage.client.transport.http import HttpConfig, HttpTransport, TokenProvider
        from openlineage.client.transport.http_common import DEFAULT_RETRY_CONFIG

        key = cfg.lineage_api_key()
        auth = TokenProvider({}) if key is None else _bearer(key.get_secret_value())
        # The endpoint is joined under the URL's own path (urljoin would replace its last
        # part without a trailing slash).
        url = lc.url if lc.url.endswith("/") else lc.url + "/"
        http = HttpConfig(
            url=url, endpoint=lc.endpoint.lstrip("/"), timeout=lc.timeout_seconds, auth=auth,
            retry={**DEFAULT_RETRY_CONFIG, "total": 2, "read": 2, "connect": 2},
        )  # fmt: skip
        return OpenLineageClient(transport=HttpTransport(http))
    from openlineage.client.transport.file import FileConfig, FileTransport

    path = cfg.lineage_file()
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    return OpenLineageClient(transport=FileTransport(FileConfig(str(path), append=True)))


def _bearer(token: str) -> Any:
    from openlineage.client.transport.http import TokenProvider

    class Bearer(TokenProvider):
        def get_bearer(self) -> str:
            return f"Bearer {token}"

    return Bearer({})


__all__ = ["Lineage", "TableLineage", "build_event", "column_lineage"]
