"""Record the replicas of ``tests/data/hudi_pre_fix/``: tables written by cdcctl before it
met Apache Hudi's own readers (the code of commit 5f29305), for the upgrade test in
``tests/peers/test_hudi_readers.py``.

Run it from a checkout of that code, with that checkout's virtualenv, giving this file's
folder as the output::

    cd <old checkout> && PYTHONPATH=. python <this checkout>/tests/data/hudi_pre_fix/make.py \\
        <this checkout>/tests/data/hudi_pre_fix

It replicates the first three batches of ``tests/peers/hudi_replicas.batches()`` into a
Merge-on-Read table (about 1 MB, most of it the bloom filters in the base files' footers):
a TIME column stored as Parquet TIME(MICROS),
keys first seen without a position (null ``_cdc_pos``, in log files on Merge-on-Read),
no payload class in ``hoodie.properties``. Three commits: no clean, rollback or archive,
so no file holds a path of the machine that made it.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

N_BATCHES = 3


def main(out: Path) -> None:
    from engine.spark import get_spark, stop_spark

    spec = importlib.util.spec_from_file_location(
        "hudi_replicas", Path(__file__).resolve().parents[2] / "peers" / "hudi_replicas.py"
    )
    assert spec is not None and spec.loader is not None
    replicas = importlib.util.module_from_spec(spec)
    sys.modules["hudi_replicas"] = replicas  # its dataclasses look themselves up there
    spec.loader.exec_module(replicas)
    spark = get_spark("local[1]", "1g")
    with tempfile.TemporaryDirectory() as tmp:
        built = replicas.build(spark, Path(tmp), ("MERGE_ON_READ",), n_batches=N_BATCHES)
        for replica in built:
            target = out / replica.table_type.lower()
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(replica.path, target, ignore=shutil.ignore_patterns(".temp"))
    stop_spark()


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
