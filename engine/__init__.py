"""cdcctl's headless engine: Debezium topics in Kafka -> Apache Hudi tables.

The stages, in data-flow order, are packages: ``source`` (Kafka), ``decode`` (message
formats -> change batches), ``replicator`` (the loop, planning, compaction policy),
``merge`` (the fold, run in Spark tasks), ``hudi`` (the table format behind one writer
interface), ``state`` (per-table states and counters). ``spark`` starts the local
SparkContext; ``playground`` (embedded broker, demo workload, crash injector) serves the
demo and the tests. See docs/architecture.md.

The CLI (``cdcctl``) and the dashboard (``tui``) use only the names exported here.
Importing this package has no side effects and pulls in neither Typer, Textual nor Rich;
names are imported on first use, so that a Spark worker importing ``engine.merge`` does
not load pydantic for the config (~0.25 s per process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.checks import Check, run_checks
    from engine.config import (
        SUPPORTED_FORMATS,
        Config,
        config_default,
        config_from_dict,
        load_config,
        render_config,
    )
    from engine.decode.catalog import check_catalog
    from engine.detail import KafkaOffsets, TableDetail, TableDetailReader
    from engine.errors import (
        CdcError,
        ConfigError,
        DecodeError,
        EnvironmentProblem,
        HudiError,
        KafkaSecurityError,
        QueryError,
        RepairError,
        SchemaEvolutionError,
        SourceDatabaseError,
        SourceError,
        StateError,
        TableNameError,
        UnknownTableError,
        WriterLockError,
    )
    from engine.explain import Explanation, KeyStory, explain_keys, parse_since
    from engine.files import private_dir, private_file
    from engine.playground.demo import DemoReport, live_demo, run_demo
    from engine.query import connect, list_tables, query, read_table
    from engine.redaction import RedactFilter, redact
    from engine.repair import RepairPlan, RepairResult, repair_table
    from engine.replicator import BatchReport, Replicator
    from engine.replicator.epochs import accept_epoch
    from engine.replicator.known import known_tables, require_tables
    from engine.replicator.replay import ReplayResult, list_dead_letters, replay_dead_letters
    from engine.replicator.reset import DeletePlan, delete_state, plan_delete, resync_offline
    from engine.signals import stop_on_signals
    from engine.spark import check_java, start_for
    from engine.state import (
        COUNTERS,
        DETAIL_VIEW,
        NEXT_VIEW,
        STATUS_FIELDS,
        STATUS_VIEW,
        TABLES_VIEW,
        WIDE_VIEW,
        ControlTopicRecord,
        Counter,
        EventRecord,
        ReplicatorRecord,
        Request,
        StatusRecord,
        TableCounters,
        TableRecord,
        TableState,
        TableStatus,
        read_status,
        send_request,
        shown_counters,
        slo_window_text,
        wait_stopped,
    )
    from engine.upstream import SourceView
    from engine.validate import TableReport, parse_database_map, redact_dsn, validate_replicas

#: Where each exported name lives.
_EXPORTS = {
    "private_dir": "engine.files",
    "private_file": "engine.files",
    "RedactFilter": "engine.redaction",
    "redact": "engine.redaction",
    "Check": "engine.checks",
    "run_checks": "engine.checks",
    "SUPPORTED_FORMATS": "engine.config",
    "check_catalog": "engine.decode.catalog",
    "Config": "engine.config",
    "config_default": "engine.config",
    "config_from_dict": "engine.config",
    "load_config": "engine.config",
    "render_config": "engine.config",
    "KafkaOffsets": "engine.detail",
    "TableDetail": "engine.detail",
    "TableDetailReader": "engine.detail",
    "CdcError": "engine.errors",
    "ConfigError": "engine.errors",
    "DecodeError": "engine.errors",
    "EnvironmentProblem": "engine.errors",
    "HudiError": "engine.errors",
    "KafkaSecurityError": "engine.errors",
    "QueryError": "engine.errors",
    "RepairError": "engine.errors",
    "SchemaEvolutionError": "engine.errors",
    "SourceDatabaseError": "engine.errors",
    "SourceError": "engine.errors",
    "StateError": "engine.errors",
    "TableNameError": "engine.errors",
    "UnknownTableError": "engine.errors",
    "WriterLockError": "engine.errors",
    "DemoReport": "engine.playground.demo",
    "run_demo": "engine.playground.demo",
    "live_demo": "engine.playground.demo",
    "connect": "engine.query",
    "list_tables": "engine.query",
    "query": "engine.query",
    "read_table": "engine.query",
    "BatchReport": "engine.replicator",
    "Replicator": "engine.replicator",
    "ReplayResult": "engine.replicator.replay",
    "list_dead_letters": "engine.replicator.replay",
    "replay_dead_letters": "engine.replicator.replay",
    "DeletePlan": "engine.replicator.reset",
    "delete_state": "engine.replicator.reset",
    "plan_delete": "engine.replicator.reset",
    "resync_offline": "engine.replicator.reset",
    "accept_epoch": "engine.replicator.epochs",
    "known_tables": "engine.replicator.known",
    "require_tables": "engine.replicator.known",
    "stop_on_signals": "engine.signals",
    "check_java": "engine.spark",
    "start_for": "engine.spark",
    "COUNTERS": "engine.state",
    "Counter": "engine.state",
    "ControlTopicRecord": "engine.state",
    "EventRecord": "engine.state",
    "ReplicatorRecord": "engine.state",
    "StatusRecord": "engine.state",
    "TableRecord": "engine.state",
    "DETAIL_VIEW": "engine.state",
    "STATUS_FIELDS": "engine.state",
    "STATUS_VIEW": "engine.state",
    "TABLES_VIEW": "engine.state",
    "NEXT_VIEW": "engine.state",
    "WIDE_VIEW": "engine.state",
    "shown_counters": "engine.state",
    "Request": "engine.state",
    "read_status": "engine.state",
    "send_request": "engine.state",
    "wait_stopped": "engine.state",
    "TableCounters": "engine.state",
    "TableState": "engine.state",
    "TableStatus": "engine.state",
    "SourceView": "engine.upstream",
    "slo_window_text": "engine.state",
    "TableReport": "engine.validate",
    "Explanation": "engine.explain",
    "KeyStory": "engine.explain",
    "explain_keys": "engine.explain",
    "parse_since": "engine.explain",
    "RepairPlan": "engine.repair",
    "RepairResult": "engine.repair",
    "repair_table": "engine.repair",
    "parse_database_map": "engine.validate",
    "redact_dsn": "engine.validate",
    "validate_replicas": "engine.validate",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
