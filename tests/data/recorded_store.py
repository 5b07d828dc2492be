"""A recorded state store with every table state, written by the engine's own StateRecorder.

Ten minutes of a replicator's life replayed through :class:`engine.state.StateRecorder`
(the writer the replicator uses) on a fixed clock, so the store and every figure the
dashboard derives from it are the same on every run:

* ``inventory_customers`` replicates throughout (REPLICATING);
* ``inventory_products`` is still applying its snapshot (SNAPSHOTTING);
* ``inventory_orders`` was paused two minutes before the end (PAUSED, lag growing);
* ``shop_payments`` has been retrying a lost broker for the last minute (FAILING, 3 retries);
* ``shop_refunds`` stopped at a schema change it cannot apply (FAILED), with two dead
  letters written by the engine's DeadLetters.

Used by the dashboard tests (``build``) and for the README's screenshot; run it to look
at the store: ``python -m tests.data.recorded_store FOLDER`` writes a config file
(``cdcctl.toml``) and the state store of its work folder into FOLDER; then
``cdcctl dashboard --config FOLDER/cdcctl.toml``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np

from engine.decode.result import BadMessage
from engine.replicator.deadletter import DeadLetters
from engine.state import StateRecorder, TableCounters, TableState, TableStatus
from engine.state import recorder as recorder_module
from engine.state import store as store_module
from engine.state.recorder import add_commit_counts

#: The recording's clock: it starts here (2026-05-28 20:26:40 UTC) and ends ten minutes later.
START = 1_780_000_000.0
STEPS, STEP_S = 60, 10.0
#: When the recording ends: the dashboard tests freeze their clock a little after it.
END = START + STEPS * STEP_S
PREFIX = "dbserver1"
TABLES = {
    "inventory_customers": f"{PREFIX}.inventory.customers",
    "inventory_products": f"{PREFIX}.inventory.products",
    "inventory_orders": f"{PREFIX}.inventory.orders",
    "shop_payments": f"{PREFIX}.shop.payments",
    "shop_refunds": f"{PREFIX}.shop.refunds",
}
CONFIG = """\
[source]
bootstrap_servers = "kafka-1.internal:9092"
topics = '^dbserver1\\.'
[target]
path = "{target}"
[replicator]
work_dir = "work"
"""


def _counts(step: int, name: str) -> dict[str, int]:
    """What the table's commit at ``step`` applied (``cdcctl.counts``), or {} for none."""
    wave = 1 + (step % 7)
    if name == "inventory_customers":
        counts = {"events_c": 20 * wave, "events_u": 35 * wave, "events_d": 3 * wave}
        if step == 0:
            counts["events_r"] = 5_000
        return {
            **counts,
            "inserts": counts["events_c"] + counts.get("events_r", 0),
            "deletes": 3 * wave,
        }
    if name == "inventory_products":
        return {"events_r": 400 + 10 * step, "inserts": 400 + 10 * step}
    if name == "inventory_orders":
        if step >= 48:
            return {}
        return {
            "events_c": 90 * wave,
            "events_u": 60 * wave,
            "late": step % 3,
            "inserts": 90 * wave,
        }
    if name == "shop_payments":
        if step >= 54:
            return {}
        return {"events_c": 12 * wave, "events_u": 4, "inserts": 12 * wave, "bad": int(step == 30)}
    if name == "shop_refunds":
        if step >= 36:
            return {}
        return {"events_c": 2 * wave, "events_d": 1, "inserts": 2 * wave, "deletes": 1}
    raise ValueError(name)


def _state(step: int, name: str) -> tuple[TableState, str | None]:
    if name == "inventory_products":
        return TableState.SNAPSHOTTING, None
    if name == "inventory_orders" and step >= 48:
        return TableState.PAUSED, None
    if name == "shop_payments" and step >= 54:
        return TableState.FAILING, "Kafka: all brokers are down (kafka-1.internal:9092)"
    if name == "shop_refunds" and step >= 36:
        return TableState.FAILED, (
            "schema change at offset 4,211 cannot be applied: column amount changed from "
            "decimal(12,2) to text; see the README's schema evolution"
        )
    return TableState.REPLICATING, None


def build(folder: Path, *, stopped: bool = True, target: str = "lake") -> Path:
    """Write ``folder/cdcctl.toml`` and the recorded ``folder/work``; the config's path.

    ``stopped``: the replicator ended cleanly at the end (else it is recorded running,
    as a live replicator would have left it). ``target``: the config's target folder
    (relative to ``folder``; the screenshots name one that is the same everywhere).
    """
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "cdcctl.toml"
    config.write_text(CONFIG.replace("{target}", target))
    work = folder / "work"
    now = [START]
    clock = SimpleNamespace(time=lambda: now[0], monotonic=time.monotonic, sleep=time.sleep)
    with (
        mock.patch.object(recorder_module, "time", clock),
        mock.patch.object(store_module, "time", clock),
        mock.patch.object(recorder_module.os, "getpid", lambda: 4242),
        mock.patch.object(recorder_module.socket, "gethostname", lambda: "replica-host"),
    ):
        rec = StateRecorder(work, str(config))
        rec.started()
        counters = {name: TableCounters() for name in TABLES}
        for name, topic in TABLES.items():
            rec.adopt(name, topic, counters[name], [], lambda _: {})
        ends = dict.fromkeys(TABLES, 0)
        for step in range(STEPS):
            now[0] = START + (step + 1) * STEP_S
            lag: dict[str, int] = {}
            statuses = []
            for name, topic in TABLES.items():
                c = counters[name]
                counts = _counts(step, name)
                events = sum(v for k, v in counts.items() if k.startswith("events_"))
                sent = events + (40 * (1 + step % 5) if not counts else 0)
                ends[name] += sent + int(name == "inventory_products") * 2_000
                if counts:
                    instant = f"2026052901{step:04d}000"
                    add_commit_counts(c, counts)
                    c.last_source_ts_ms = int((now[0] - 1.5 - (step % 3)) * 1000)
                    sample = np.array([c.last_source_ts_ms - 800, c.last_source_ts_ms])
                    rec.committed(name, instant, counts, sample)
                    lag[name] = int(name == "inventory_products") * 2_000 * (STEPS - step)
                else:
                    lag[name] = ends[name] - (
                        c.snapshot_rows + c.inserts + c.updates + c.deletes + c.late
                    )
                state, error = _state(step, name)
                if state is TableState.FAILING and step in (54, 56, 58):
                    c.retries += 1
                    rec.event(name, "retry", f"warning: {error}; retry {c.retries}")
                statuses.append(TableStatus(name, topic, state, error, c))
            rec.sync(statuses, lag, force=True)
        if stopped:
            now[0] = END + 2
            rec.replicator_state("stopped")
            rec.sync(statuses, force=True)
        rec.close()
    DeadLetters(work / "deadletter").quarantine(
        "shop_refunds",
        [
            BadMessage(TABLES["shop_refunds"], 0, 4_199, b'{"id":17}', b"{not json", "bad JSON"),
            BadMessage(
                TABLES["shop_refunds"], 0, 4_203, b'{"id":18}', b"\x00\x01", "not UTF-8 text"
            ),
        ],
    )
    return config


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "recorded")
    print(build(target, stopped="--running" not in sys.argv))
