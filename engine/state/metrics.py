"""The Prometheus endpoint: the replicator's live state in Prometheus' text format.

Started by the replicator when ``replicator.metrics_port`` is set; it serves
``http://<metrics_host>:<port>/metrics`` from a thread of its own. Every scrape reads the
figures the :class:`~engine.state.recorder.StateRecorder` last wrote to the state store
(at most 0.5 s old): the same numbers ``cdcctl status --json`` shows, under Prometheus'
naming conventions (``_total`` counters, base units, one label per dimension).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.errors import ConfigError
from engine.state.model import COUNTERS, TableState
from engine.state.recorder import StateRecorder

#: The table states a running replicator serves (STOPPED is read while none runs, when
#: there is no endpoint either).
LIVE_STATES = [s for s in TableState if s is not TableState.STOPPED]

log = logging.getLogger("cdcctl.metrics")

#: ``op`` label of ``cdcctl_events_applied_total`` -> the status counter.
APPLIED_OPS = {c.op: c.name for c in COUNTERS if c.op}
#: Other per-table counters: metric name (without ``_total``) -> status counter, help.
METRIC_COUNTERS = {c.metric: (c.name, c.help) for c in COUNTERS if c.metric and not c.gauge}
#: Per-table gauges: metric name -> status figure, help.
GAUGES = {
    **{c.metric: (c.name, c.help) for c in COUNTERS if c.metric and c.gauge},
    "cdcctl_lag_messages": ("lag_messages", "Messages in the topic not applied yet"),
    "cdcctl_lag_seconds": (
        "lag_seconds",
        "Now minus the source time of the newest applied event while messages wait; "
        "else now minus the connector's newest heartbeat (or event), when it sends them; "
        "else 0",
    ),
    "cdcctl_events_per_second": ("events_per_s", "Events applied per second, last minute"),
    "cdcctl_last_commit_timestamp_seconds": (
        "last_commit_at",
        "Unix time of the table's last Hudi commit",
    ),
    "cdcctl_last_event_timestamp_seconds": (
        "last_event_at",
        "Source commit time (Unix) of the newest applied event",
    ),
}
QUANTILES = {"0.5": "latency_p50_s", "0.95": "latency_p95_s", "0.99": "latency_p99_s"}
REPLICATOR_STATES = ("running", "paused", "stopping", "stopped", "failed")


class StateCollector(Collector):
    """Metrics from a recorder's last written rows (safe to call from any thread)."""

    def __init__(self, recorder: StateRecorder) -> None:
        self.recorder = recorder

    def collect(self) -> Iterator[Metric]:
        state, rows = self.recorder.snapshot()
        tables = sorted(rows.items())
        replicator = GaugeMetricFamily(
            "cdcctl_replicator_state", "The replicator's state (1: current)", labels=["state"]
        )
        for s in REPLICATOR_STATES:
            replicator.add_metric([s], 1.0 if s == state else 0.0)
        yield replicator
        table_state = GaugeMetricFamily(
            "cdcctl_table_state", "Each table's state (1: current)", labels=["table", "state"]
        )
        for name, row in tables:
            for s in LIVE_STATES:
                table_state.add_metric([name, s.value], 1.0 if row["state"] == s.value else 0.0)
        yield table_state
        applied = CounterMetricFamily(
            "cdcctl_events_applied",
            "Source events applied, by op (each once; tombstones and late events excluded)",
            labels=["table", "op"],
        )
        for name, row in tables:
            for op, counter in APPLIED_OPS.items():
                applied.add_metric([name, op], float(row[counter]))
        yield applied
        for metric, (counter, text) in METRIC_COUNTERS.items():
            family = CounterMetricFamily(metric, text, labels=["table"])
            for name, row in tables:
                family.add_metric([name], float(row[counter]))
            yield family
        for metric, (figure, text) in GAUGES.items():
            gauge = GaugeMetricFamily(metric, text, labels=["table"])
            for name, row in tables:
                if row.get(figure) is not None:  # unknown figures are left out, not 0
                    gauge.add_metric([name], float(row[figure]))
            yield gauge
        latency = GaugeMetricFamily(
            "cdcctl_latency_seconds",
            "Source commit to Hudi commit of the events applied in the last 5 minutes",
            labels=["table", "quantile"],
        )
        for name, row in tables:
            for q, figure in QUANTILES.items():
                if row.get(figure) is not None:
                    latency.add_metric([name, q], float(row[figure]))
        yield latency
        skipped = CounterMetricFamily(
            "cdcctl_skipped_records",
            "Records of topics that hold no rows (transaction markers, heartbeats, logical "
            "decoding messages, ...), read and written to no table, this run",
            labels=["topic", "kind"],
        )
        for topic, (kind, count) in sorted(self.recorder.control_snapshot().items()):
            skipped.add_metric([topic, kind], float(count))
        yield skipped
        yield from self._source(tables)
        yield from self._slo()

    def _slo(self) -> Iterator[Metric]:
        """Each table's compliance with ``replicator.slo`` (nothing without one)."""
        goal, shares = self.recorder.slo_snapshot()
        if goal is None:
            return
        ratio = GaugeMetricFamily(
            "cdcctl_slo_compliance_ratio",
            f"Share of the SLO's window the table was within {goal.within_seconds:g} s",
            labels=["table"],
        )
        met = GaugeMetricFamily(
            "cdcctl_slo_met", f"1: the table meets its SLO ({goal.percent:g}%)", labels=["table"]
        )
        for name, share in sorted(shares.items()):
            ratio.add_metric([name], share)
            met.add_metric([name], 1.0 if goal.met(share) else 0.0)
        yield ratio
        yield met

    def _source(self, tables: list[tuple[str, dict]]) -> Iterator[Metric]:
        """The source side at the watcher's newest look (nothing before the first)."""
        view = self.recorder.source_snapshot()
        if view is None:
            return
        up = GaugeMetricFamily(
            "cdcctl_source_connector_up",
            "1: the Kafka Connect connector and all its tasks are RUNNING (source.connect_url)",
            labels=["connector"],
        )
        for c in view.connectors or ():
            running = c.state == "RUNNING" and all(t.state == "RUNNING" for t in c.tasks)
            up.add_metric([c.name], 1.0 if running and c.tasks else 0.0)
        yield up
        active = GaugeMetricFamily(
            "cdcctl_source_slot_active",
            "1: a connector reads the replication slot",
            labels=["slot"],
        )
        lost = GaugeMetricFamily(
            "cdcctl_source_slot_lost", "1: the replication slot lost WAL it needed", labels=["slot"]
        )
        kept = GaugeMetricFamily(
            "cdcctl_source_slot_retained_wal_bytes",
            "WAL the replication slot keeps the database from recycling",
            labels=["slot"],
        )
        for s in view.slots or ():
            active.add_metric([s.name], 1.0 if s.active else 0.0)
            lost.add_metric([s.name], 1.0 if s.wal_status == "lost" else 0.0)
            if s.retained_bytes is not None:
                kept.add_metric([s.name], float(s.retained_bytes))
        yield from (active, lost, kept)
        behind = GaugeMetricFamily(
            "cdcctl_source_binlog_behind_bytes",
            "MySQL/MariaDB binlog bytes between the server's end and the connector's "
            "recorded position",
            labels=["connector"],
        )
        for b in view.binlogs:
            if b.behind_bytes is not None:
                behind.add_metric([b.connector], float(b.behind_bytes))
        yield behind
        beats = GaugeMetricFamily(
            "cdcctl_source_heartbeat_timestamp_seconds",
            "Unix time of the newest Debezium heartbeat of each topic prefix",
            labels=["prefix"],
        )
        for prefix, at in sorted(view.heartbeats.items()):
            beats.add_metric([prefix], at)
        yield beats
        problems = GaugeMetricFamily(
            "cdcctl_table_source_problems",
            "Problems of the connector and slot behind the table (a stopped task, a lost slot)",
            labels=["table"],
        )
        for name, row in tables:
            problems.add_metric([name], float(len(view.problems_for(row["topic"]))))
        yield problems
        yield GaugeMetricFamily(
            "cdcctl_source_unreachable",
            "Parts of the source side the last look could not reach (Connect, the database)",
            value=float(len(view.errors)),
        )


@dataclass
class MetricsServer:
    """A running endpoint."""

    server: WSGIServer
    thread: threading.Thread
    host: str

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def serve_metrics(recorder: StateRecorder, host: str, port: int) -> MetricsServer:
    """Serve ``recorder``'s figures on ``host:port`` (0: a free port).

    Raises:
        ConfigError: the address cannot be bound (in use, or not an address here).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StateCollector(recorder))
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}",
            hint="choose another replicator.metrics_port (or metrics_host), or leave "
            "metrics_port unset",
        ) from None
    return MetricsServer(server, thread, host)
