"""Record the fixture the detail screen's snapshot tests render.

    .venv/bin/python -m tests.data.detail.make

Runs the real replicator (embedded broker, local Spark) through
:func:`tests.detail_replica.build_detail_replica` with the topic prefix ``shop``, then
keeps what the screen reads: the replica (``lake/app_items``, cleaned down to its latest
file slices) and the state store
(``work/state.db``, copied with SQLite's backup so the WAL is folded in), and in
``fixture.json`` the topic and a frozen "now" (a minute after the store's last write),
so that every time shown is the same on every run.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

from engine.hudi import HudiWriter
from engine.hudi.avro_models import CLEANER_PLAN, deserialize_avro_metadata, serialize_avro_metadata
from engine.playground.broker import EmbeddedBroker
from engine.spark import get_spark, stop_spark
from tests.detail_replica import build_detail_replica

HERE = Path(__file__).resolve().parent
PREFIX = "shop"
TABLE = "app_items"


def relative_clean_plans(table: Path, recorded_at: Path) -> None:
    """Make the clean plans of ``table`` (recorded at ``recorded_at``) name the files
    they deleted relative to the table.

    A clean plan holds the full path of each file it deletes, as Hudi's own plans do:
    here the temporary folder of the recording, a path of that machine. The cleans
    completed, so no writer runs their plans again; readers take only the instant to
    retain from them. (A pending plan's bare file name would be taken in the table's
    folder by cdcctl, but resolved against its working directory by Hudi's own cleaner.)
    """
    for plan_file in sorted((table / ".hoodie").glob("*.clean.*")):
        plan = deserialize_avro_metadata(plan_file.read_bytes())
        for infos in (plan.get("filePathsToBeDeletedPerPartition") or {}).values():
            for info in infos:
                path = Path(info["filePath"])
                if path.is_absolute():
                    info["filePath"] = str(path.relative_to(recorded_at))
        plan_file.write_bytes(serialize_avro_metadata(CLEANER_PLAN, plan))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        root = Path(tmp)
        spark = get_spark("local[2]", "1g")
        try:
            cfg, topic = build_detail_replica(broker, spark, root, PREFIX)
        finally:
            stop_spark()
        for sub in ("lake", "work"):
            shutil.rmtree(HERE / sub, ignore_errors=True)
        # Only the latest slices stay (a base file is ~430 kB: its bloom filter has
        # Hudi's fixed size): a clean, recorded on the timeline as Hudi records it.
        HudiWriter.open(cfg.target_path() / TABLE).clean(1)
        shutil.copytree(cfg.target_path() / TABLE, HERE / "lake" / TABLE)
        relative_clean_plans(HERE / "lake" / TABLE, cfg.target_path() / TABLE)
        # The table's writer lock file names this machine; readers never look at it.
        (HERE / "lake" / TABLE / ".hoodie" / ".cdcctl" / "writer.lock").unlink()
        (HERE / "work").mkdir()
        source = sqlite3.connect(cfg.work_path() / "state.db")
        target = sqlite3.connect(HERE / "work" / "state.db")
        source.backup(target)
        target.execute("PRAGMA journal_mode=DELETE")
        source.close()
        target.close()
        last = sqlite3.connect(HERE / "work" / "state.db").execute(
            "SELECT max(updated_at) FROM tables"
        )
        now = round(last.fetchone()[0] + 60)
        (HERE / "fixture.json").write_text(json.dumps({"topic": topic, "now": now}) + "\n")
    print(f"recorded {TABLE} of {topic} into {HERE}")


if __name__ == "__main__":
    main()
