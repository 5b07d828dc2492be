"""Delete tombstones as delta chains: a Merge-on-Read append writes what changed, not the
whole set, and the chain read back is the set a full rewrite would have written.

The same stream (deletes, re-inserts of deleted keys, updates, and late replays of
long-deleted keys' creates) goes batch by batch into a Merge-on-Read table whose groups
are never compacted (so chains grow past ``MAX_CHAIN``) and into a Copy-on-Write table
(every write a full sidecar). After every batch: both replicas equal the oracle fold,
the chain resolves to the Copy-on-Write table's tombstones and to the oracle's deleted
keys, and the newest sidecar of an append holds only that batch's changes.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.config import config_from_dict
from engine.hudi import tombstones
from engine.hudi.table import HudiTable
from engine.model import KEY, POS, POS_SUB, SOURCE_TS
from engine.replicator import Replicator
from tests import builders
from tests.engine.test_properties import Msg
from tests.integration.replicas import read_replica
from tests.oracle import fold

pytestmark = [pytest.mark.spark]

TOPIC = "srv.app.t"
COLUMNS = [("id", "int32"), ("name", "string")]
COMPARED = [KEY, POS, POS_SUB, SOURCE_TS]
KEYS = 200


def _replicator(root: Path, spark, **hudi) -> Replicator:
    cfg = config_from_dict(
        {
            "source": {"bootstrap_servers": "127.0.0.1:1", "topics": "."},
            "target": {"path": str(root / "lake")},
            "hudi": {"num_buckets": 1, "clean_retain_commits": 2, **hudi},
            "replicator": {"work_dir": str(root / "work")},
        }
    )
    return Replicator(cfg, spark=spark)


def _stream(rng: random.Random, batches: int) -> list[list[tuple[bytes, bytes | None]]]:
    """Batches of (key, value) in source order, with late replays mixed in."""
    lsn, live, gone, sent = 100, {}, {}, {}
    out = [[]]
    for k in range(KEYS):
        lsn += 1
        live[k] = lsn
        out[0].append((builders.key(k), builders.value("c", lsn, {"id": k, "name": "a"}, COLUMNS)))
        sent[k] = out[0][-1]
    for _ in range(batches):
        batch = []
        for _ in range(rng.randint(1, 3)):
            lsn += 1
            k = rng.choice(sorted(live))
            del live[k]
            gone[k] = lsn
            batch += [
                (builders.key(k), builders.value("d", lsn, None, COLUMNS)),
                (builders.key(k), None),
            ]
        if gone and rng.random() < 0.3:  # a deleted key comes back
            lsn += 1
            k = rng.choice(sorted(gone))
            del gone[k]
            live[k] = lsn
            batch.append(
                (builders.key(k), builders.value("c", lsn, {"id": k, "name": f"b{lsn}"}, COLUMNS))
            )
        lsn += 1
        k = rng.choice(sorted(live))
        batch.append(
            (builders.key(k), builders.value("u", lsn, {"id": k, "name": f"u{lsn}"}, COLUMNS))
        )
        if gone:  # a replay of an old create of a key deleted since: must stay deleted
            batch.append(sent[rng.choice(sorted(gone))])
        out.append(batch)
    return out


def _sidecar(table: HudiTable) -> Path | None:
    (group,) = table.file_groups().values()
    path = tombstones.sidecar_path(table.base_path, group.file_id, group.state_instant)
    return path if path.is_file() else None


def _tombstones(table: HudiTable) -> dict[str, tuple]:
    path = _sidecar(table)
    found = tombstones.read(path) if path is not None else None
    if found is None:
        return {}
    return {r[KEY]: tuple(r[c] for c in COMPARED) for r in found.to_pylist()}


def test_a_chain_resolves_to_the_full_set_and_appends_write_only_their_changes(
    tmp_path: Path, spark
) -> None:
    rng = random.Random(7)
    batches = _stream(rng, 3 * tombstones.MAX_CHAIN)
    mor = _replicator(
        tmp_path / "mor", spark, compaction_max_log_files=1000, compaction_max_log_ratio=1e9
    )
    cow = _replicator(tmp_path / "cow", spark, table_type="COPY_ON_WRITE")
    applied: list[Msg] = []
    depths, delta_rows = [], []
    for batch in batches:
        msgs = [Msg(TOPIC, k, v, len(applied) + i) for i, (k, v) in enumerate(batch)]
        applied += msgs
        before = _tombstones(HudiTable.open(tmp_path / "mor/lake/app_t")) if depths else {}
        mor.apply(msgs)
        cow.apply(msgs)
        m = HudiTable.open(tmp_path / "mor/lake/app_t")
        c = HudiTable.open(tmp_path / "cow/lake/app_t")
        expected = fold([(TOPIC, x.key(), x.value()) for x in applied])[TOPIC]
        assert read_replica(m.base_path) == expected
        assert read_replica(c.base_path) == expected
        chained = _tombstones(m)
        assert chained == _tombstones(c)
        assert set(chained) == {str(k) for k in range(KEYS)} - set(expected)
        sidecar = _sidecar(m)
        depth = (
            int((pq.read_metadata(sidecar).metadata or {}).get(b"cdcctl.tombstones.depth", 0))
            if sidecar
            else 0
        )
        depths.append(depth)
        if depth:
            changed = {k for k in set(chained) | set(before) if chained.get(k) != before.get(k)}
            rows = pq.read_metadata(sidecar).num_rows
            delta_rows.append(rows)
            assert rows == len(changed)  # this batch's changes, not the whole set
    assert max(depths) == tombstones.MAX_CHAIN  # chains grew to the cap ...
    assert depths.count(0) >= 3  # ... and a full sidecar started the next one
    assert max(delta_rows) < len(_tombstones(HudiTable.open(tmp_path / "mor/lake/app_t")))
    # Cleaning swept old chains but kept every member the live sidecar's chain needs.
    folder = tombstones.folder(tmp_path / "mor/lake/app_t")
    assert len(list(folder.iterdir())) <= tombstones.MAX_CHAIN + 1 + 3


def test_the_sweep_keeps_a_live_chains_members_and_drops_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "t"
    folder = tombstones.folder(root)
    folder.mkdir(parents=True)
    full = tombstones.SCHEMA.empty_table()
    tombstones.write(full, folder / "g1_001.parquet")
    tombstones.write(full, folder / "g1_002.parquet", parent="001", depth=1)
    tombstones.write(full, folder / "g1_003.parquet", parent="002", depth=2)
    tombstones.write(full, folder / "g1_004.parquet", parent="002", depth=2)  # rolled back
    tombstones.write(full, folder / "g2_000.parquet")  # a cleaned slice's
    tombstones.write(full, folder / "g2_005.parquet")
    removed = tombstones.sweep(root, {("g1", "003"), ("g2", "005")})
    assert removed == 2
    assert sorted(p.name for p in folder.iterdir()) == [
        "g1_001.parquet",
        "g1_002.parquet",
        "g1_003.parquet",
        "g2_005.parquet",
    ]
    # A chain whose parent is gone is an error, never an empty set; so is a loop.
    (folder / "g1_001.parquet").unlink()
    with pytest.raises(Exception, match="is missing"):
        tombstones.read_chain(folder / "g1_003.parquet")
    tombstones.write(full, folder / "g3_007.parquet", parent="007", depth=1)
    with pytest.raises(Exception, match="is unreadable.*longer than"):
        tombstones.read_chain(folder / "g3_007.parquet")
