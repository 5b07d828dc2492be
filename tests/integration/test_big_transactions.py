"""Transactions larger than a poll's share of a batch, replicated while catching up.

Adaptive batching ends a poll early (once the batch in flight has merged, or after a
twentieth of ``replicator.max_batch_events`` while behind, or as soon as anything was
read with nothing in flight). A transaction is held back until its END record and all
its events are in one batch, so a poll that ends early must not keep a transaction
larger than those early ends from ever fitting: it must still be applied whole.
"""

from __future__ import annotations

import re

from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from tests import builders
from tests.integration.replicas import assert_replicas_match, run_cli, write_config
from tests.integration.test_transactions import COLS, _tx_record
from tests.oracle import fold


def test_transactions_larger_than_an_early_poll_are_applied_whole(
    broker, topic_prefix, tmp_path
) -> None:
    topic = f"{topic_prefix}.app.a"
    tx_topic = f"{topic_prefix}.transaction"
    data, control, ends = [], [], set()
    lsn = 1000
    for txid, size in enumerate([1_200, 30, 2_500, 700], start=1):
        control.append((tx_topic, *_tx_record("BEGIN", f"{txid}:{lsn}", None)))
        for order in range(1, size + 1):
            lsn += 1
            row = {"id": order, "name": f"tx{txid}", "qty": order}
            value = builders.value("u", lsn, row, COLS, tx=(f"{txid}:{lsn}", order, order))
            data.append((topic, builders.key(order), value))
        ends.add(len(data))
        control.append((tx_topic, *_tx_record("END", f"{txid}:{lsn + 1}", {"app.a": size})))
    broker.create_topics([topic, tx_topic])
    produce_messages(broker.bootstrap_servers, data)
    produce_messages(broker.bootstrap_servers, control)
    target = tmp_path / "lake"
    config = write_config(
        tmp_path / "c.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}\\.app\\.",
        target,
        max_batch_events=4_000,
        max_batch_seconds=0.2,
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=300)
    assert run.returncode == 0, run.stderr
    table = HudiTable.open(target / table_name_for_topic(topic))
    for instant in table.completed_instants():
        checkpoint = table.commit_metadata(instant)["extraMetadata"]["deltastreamer.checkpoint.key"]
        assert int(checkpoint.rsplit(":", 1)[1]) in ends, f"{instant} ends inside a transaction"
    assert_replicas_match(target, fold(data))
