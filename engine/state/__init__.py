"""Per-table state the replicator reports: states, counters, status records, and the
state store (SQLite in the work folder) that the running replicator writes and the CLI
reads (``status``) and sends control requests through (``pause``, ``resume``, ``stop``).
"""

from __future__ import annotations

from engine.state.control import read_status, send_request, wait_stopped
from engine.state.model import (
    COUNTERS,
    DETAIL_VIEW,
    NEXT_VIEW,
    STATUS_VIEW,
    TABLES_VIEW,
    WIDE_VIEW,
    Counter,
    TableCounters,
    TableState,
    TableStatus,
    shown_counters,
)
from engine.state.recorder import StateRecorder
from engine.state.records import (
    STATUS_FIELDS,
    ControlTopicRecord,
    EventRecord,
    ReplicatorRecord,
    StatusRecord,
    TableRecord,
)
from engine.state.slo import SloGoal
from engine.state.slo import span_text as slo_window_text
from engine.state.store import Request, StateStore, store_path

__all__ = [
    "COUNTERS",
    "DETAIL_VIEW",
    "NEXT_VIEW",
    "STATUS_VIEW",
    "TABLES_VIEW",
    "WIDE_VIEW",
    "ControlTopicRecord",
    "Counter",
    "EventRecord",
    "ReplicatorRecord",
    "STATUS_FIELDS",
    "Request",
    "SloGoal",
    "StateRecorder",
    "StateStore",
    "StatusRecord",
    "TableCounters",
    "TableRecord",
    "TableState",
    "TableStatus",
    "read_status",
    "send_request",
    "shown_counters",
    "slo_window_text",
    "store_path",
    "wait_stopped",
]
