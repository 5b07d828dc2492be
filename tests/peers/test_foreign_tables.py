"""Tables Apache Hudi's own Spark writer made are refused by cdcctl, never written.

Hudi 0.15.0's Spark writer (``interop/spark3.5/hudi_write.py`` in the pinned pyspark 3.5
virtualenv, the ``hudi-0.15`` bundle) writes four tables at the folders four topics map
to: Merge-on-Read with the bucket index and the metadata table on; one with a compaction
scheduled and never run; a Copy-on-Write one with a clustering pending; one with the
metadata table off and only plain Hudi commits. The real ``cdcctl start
--until-caught-up`` (a child process) then replicates six topics: the four tables are
FAILED with a message naming what was found and what to do, every file under their
folders is byte-for-byte what Hudi left (no writer lock file either), the other two
tables replicate to the end and equal the oracle (read by hudi-rs), and the run exits 3.
``cdcctl resync`` refuses such a table too; ``cdcctl query`` still reads one.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.playground.workload import InventoryWorkload
from tests.engine.test_ownership import fingerprint
from tests.integration.replicas import read_replica, run_cli, write_config
from tests.oracle import fold
from tests.peers import jars

pytestmark = [pytest.mark.peers, pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

WRITER = jars.INTEROP / "spark3.5" / "hudi_write.py"
NAMING = "prefix_schema_table"
#: What each kind of table shows, as the refusal names it.
FOUND = {
    "mdt": r"a metadata table \(hoodie\.table\.metadata\.partitions=files\)",
    "compaction": r"a pending compaction \(\d{17}\.compaction\.requested\)",
    "clustering": r"a pending clustering \(\d{17}\.replacecommit\.requested\)",
    "plain": r"commits without cdcctl's bookkeeping \(\d{17}\.deltacommit, \d{17}\.deltacommit\)",
}


def hudi_write(tables: dict[str, Path]) -> list[dict]:
    """Write ``kind -> folder`` tables with Hudi's Spark writer; what it reports."""
    python, lib = jars.venv_python("spark3.5"), jars.lib_dir("hudi-0.15")
    run = subprocess.run(
        [str(python), str(WRITER), "--jars", str(lib)]
        + [f"{kind}={path}" for kind, path in tables.items()],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-4000:]
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def test_tables_hudis_spark_writer_made_are_refused_and_left_as_they_were(
    broker, topic_prefix: str, tmp_path: Path
) -> None:
    hudi_side = InventoryWorkload(seed=5, prefix=f"{topic_prefix}_h", schemas=True)
    own_side = InventoryWorkload(seed=6, prefix=f"{topic_prefix}_c", schemas=True)
    events = list(hudi_side.events(400)) + list(own_side.events(400))
    produce_messages(broker.bootstrap_servers, events)
    target, work = tmp_path / "lake", tmp_path / "work"
    folder = {
        topic: target / table_name_for_topic(topic, NAMING)
        for w in (hudi_side, own_side)
        for topic in w.topics.values()
    }
    foreign = {
        "mdt": folder[hudi_side.topic("customers")],
        "compaction": folder[hudi_side.topic("products")],
        "clustering": folder[hudi_side.topic("orders")],
        "plain": folder[own_side.topic("customers")],
    }
    written = hudi_write(foreign)
    assert [w["kind"] for w in written] == list(foreign)
    before = {kind: fingerprint(path) for kind, path in foreign.items()}
    for kind, prints in before.items():
        assert not any("cdcctl" in name for name in prints), (kind, prints)

    config = write_config(
        tmp_path / "cdcctl.toml",
        broker.bootstrap_servers,
        f"^{re.escape(topic_prefix)}_[hc]\\.",
        target,
        target_keys={"table_naming": NAMING},
        work_dir=work,
        max_batch_events=200,
    )
    run = run_cli("start", "--config", str(config), "--until-caught-up", timeout=900)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    for kind, path in foreign.items():
        name = path.name
        message = re.search(
            rf"{name}: FAILED: table {name}: {re.escape(str(path))} holds a table another "
            rf"Hudi writer made or changed: (.*); cdcctl will not write into it",
            run.stderr,
        )
        assert message, (kind, run.stderr)
        assert re.search(FOUND[kind], message.group(1)), (kind, message.group(1))
        assert fingerprint(path) == before[kind], f"{kind}: {path} was written"
    assert "move the folder out of target.path to keep it" in run.stderr
    # The other tables went on to the end.
    expected = fold(events)
    for table in ("products", "orders"):
        topic = own_side.topic(table)
        rows = read_replica(folder[topic])
        assert rows == expected[topic] and rows, topic
    status = run_cli("status", "--config", str(config))
    assert status.stdout.count("FAILED") >= len(foreign), status.stdout

    # Resync would remove another writer's data: refused, nothing removed.
    mdt = foreign["mdt"]
    out = run_cli("resync", mdt.name, "--config", str(config))
    assert out.returncode == 3, out.stdout + out.stderr
    assert "a metadata table" in out.stderr and "Traceback" not in out.stderr
    assert fingerprint(mdt) == before["mdt"]
    # Reading stays possible: Hudi's 20 rows of the plain table through cdcctl query.
    plain = foreign["plain"]
    out = run_cli(
        "query", f"SELECT count(*) AS n FROM {plain.name}", "--config", str(config), "--csv"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["n", "20"], out.stdout
    assert fingerprint(plain) == before["plain"]
