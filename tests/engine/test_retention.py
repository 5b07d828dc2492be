"""Retention by time (Hudi's ``KEEP_LATEST_BY_HOURS``) and by count, planned on real tables.

The earliest commit retained is computed as Hudi 0.14/0.15's
``CleanerUtils.getEarliestCommitToRetain`` does; the clean records the policy in its plan
and metadata (decoded with the Avro schemas Hudi reads them with); every instant from it
on reads the same with hudi-rs before and after the clean; archiving never passes it;
``cdcctl query --as-of`` names the key that decides how far back a table reads.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine.config import DEFAULT_CLEAN_RETAIN_HOURS, config_from_dict, render_config
from engine.errors import ConfigError, HudiError, QueryError
from engine.hudi import avro_models as am
from engine.hudi import timeline as tl
from engine.hudi.retention import KEEP_LATEST_BY_HOURS, KEEP_LATEST_COMMITS, Retention
from engine.hudi.writer import HudiWriter
from engine.query import resolve_instant
from tests.engine.test_hudi_table import Writer, hudi_rows, keys_by_bucket, make_table


def _at(instant: str) -> datetime:
    """The UTC time of a 17-digit instant."""
    return datetime.strptime(instant, "%Y%m%d%H%M%S%f").replace(tzinfo=UTC)


def _plan_and_metadata(base: Path, clean: str) -> tuple[dict, dict]:
    hoodie = base / ".hoodie"
    plan = am.deserialize_avro_metadata(
        (hoodie / f"{clean}.clean.requested").read_bytes(), am.CLEANER_PLAN
    )
    meta = am.deserialize_avro_metadata((hoodie / f"{clean}.clean").read_bytes(), am.CLEAN_METADATA)
    return plan, meta


# ----------------------------------------------------------------- the earliest commit retained


def test_earliest_retained_by_hours_is_the_first_commit_inside_the_window() -> None:
    completed = ["20260101000000000", "20260101010000000", "20260101013000000", "20260101020000000"]
    hour = Retention(hours=1)
    now = datetime(2026, 1, 1, 2, 0, 0, tzinfo=UTC)
    # Window [01:00:00.000, 02:00]: the commit exactly at the edge is inside (Hudi: >=).
    assert hour.cutoff(now) == "20260101010000000"
    assert hour.earliest_retained(completed, now) == "20260101010000000"
    assert hour.earliest_retained(completed, now + timedelta(milliseconds=1)) == (
        "20260101013000000"
    )
    # Every commit older than the window: none retained, nothing is cleaned (Hudi plans none).
    assert hour.earliest_retained(completed, now + timedelta(hours=2)) is None
    # Every commit inside: the first one.
    assert Retention(hours=24).earliest_retained(completed, now) == completed[0]
    assert Retention(hours=0.25).cutoff(now) == "20260101014500000"
    assert hour.earliest_retained([], now) is None


def test_earliest_retained_by_commits_is_hudis_nth_newest() -> None:
    completed = [f"2026010100000000{i}" for i in range(5)]
    assert Retention(commits=2).earliest_retained(completed) == completed[3]
    assert Retention(commits=4).earliest_retained(completed) == completed[1]
    # Hudi retains everything while there are no more commits than it keeps.
    assert Retention(commits=5).earliest_retained(completed) is None
    assert Retention(commits=6).earliest_retained(completed) is None


def test_a_retention_is_one_positive_policy() -> None:
    assert Retention(hours=1).policy == KEEP_LATEST_BY_HOURS == "KEEP_LATEST_BY_HOURS"
    assert Retention(commits=3).policy == KEEP_LATEST_COMMITS
    assert (Retention(hours=1).describe(), Retention(hours=2.5).describe()) == (
        "1 hour",
        "2.5 hours",
    )
    for bad in ({}, {"hours": 1, "commits": 1}, {"hours": 0}, {"hours": -1}, {"commits": 0}):
        with pytest.raises(HudiError):
            Retention(**bad)


# ----------------------------------------------------------------- the clean, by time


def test_clean_by_hours_keeps_every_instant_of_the_window_readable(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    table = make_table(base)
    w = Writer(table)
    keys = keys_by_bucket(2)
    t1 = w.upsert({k: ("v1", 1) for k in keys[0] + keys[1] + keys[2]})
    t2 = w.upsert({keys[0][0]: ("v2", 2)})
    t3 = w.upsert({keys[0][1]: ("v3", 3), keys[1][0]: ("v3", 3)})
    t4 = w.upsert({keys[1][1]: ("v4", 4)})
    states = {t: hudi_rows(base, as_of=t) for t in (t1, t2, t3, t4)}
    hour = Retention(hours=1)

    # The window still holds t1: nothing to delete, so no clean instant at all.
    assert table.clean(hour, now=_at(t1) + timedelta(hours=1)) == []
    # A window ending long after the last commit holds none: nothing is cleaned either.
    assert table.clean(hour, now=_at(t4) + timedelta(hours=5)) == []
    assert not tl.scan(base / ".hoodie").services

    # The window starts at t3 (t1 and t2 are older than an hour at that moment).
    now = _at(t3) + timedelta(hours=1)
    deleted = sorted(table.clean(hour, now=now))
    # Same files as keeping the newest two commits: t3 is the earliest retained either way.
    assert len(deleted) == 3 and all(t1 in n or t2 in n for n in deleted)
    for t in (t3, t4):
        assert hudi_rows(base, as_of=t) == states[t]
    assert hudi_rows(base) == w.expected()

    [clean] = tl.scan(base / ".hoodie").completed_services("clean")
    plan, meta = _plan_and_metadata(base, clean)
    assert plan["policy"] == KEEP_LATEST_BY_HOURS
    assert plan["earliestInstantToRetain"] == {
        "timestamp": t3,
        "action": "commit",
        "state": "COMPLETED",
    }
    assert plan["lastCompletedCommitTimestamp"] == t4
    assert meta["earliestCommitToRetain"] == t3
    assert meta["partitionMetadata"][""]["policy"] == KEEP_LATEST_BY_HOURS
    assert sorted(meta["partitionMetadata"][""]["successDeleteFiles"]) == deleted

    # The oldest readable instant is now t3; an older --as-of is refused naming the key.
    assert table.oldest_readable() == t3
    assert resolve_instant(table, "orders", t3) == t3
    with pytest.raises(QueryError) as caught:
        resolve_instant(table, "orders", t2)
    assert "oldest readable instant is " + t3 in caught.value.message
    assert "hudi.clean_retain_hours" in caught.value.hint


def test_clean_by_commits_records_its_own_policy(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    table = make_table(base)
    w = Writer(table)
    t1 = w.upsert({1: ("a", 1)})
    t2 = w.upsert({1: ("b", 2)})
    w.upsert({1: ("c", 3)})
    assert table.clean(Retention(commits=1)) != []
    [clean] = tl.scan(base / ".hoodie").completed_services("clean")
    plan, meta = _plan_and_metadata(base, clean)
    assert plan["policy"] == meta["partitionMetadata"][""]["policy"] == KEEP_LATEST_COMMITS
    with pytest.raises(QueryError) as caught:
        resolve_instant(table, "orders", t2)
    assert "hudi.clean_retain_commits" in caught.value.hint
    assert t1 < t2


def test_archiving_never_passes_the_earliest_commit_retained(tmp_path: Path) -> None:
    table = make_table(tmp_path / "orders")
    w = Writer(table)
    instants = [w.upsert({1: (f"v{i}", i)}) for i in range(12)]
    writer = HudiWriter(table)
    # Every commit is seconds old: an hour retains all of them, past keep_max too.
    assert writer.retained_from(Retention(hours=1)) == instants[0]
    assert writer.archive(2, 3, 0, Retention(hours=1)) == []
    assert table.completed_instants() == instants
    # A window starting at the 8th commit: archiving stops right before it.
    retain_from = Retention(hours=1).earliest_retained(
        instants, _at(instants[7]) + timedelta(hours=1)
    )
    assert retain_from == instants[7]
    assert table.instants_to_archive(2, 3, retain_from) == instants[:7]
    # Without the bound, keep_min alone would leave only two.
    assert table.instants_to_archive(2, 3) == instants[:10]
    assert table.archive(2, 3, 0, frozenset(), retain_from) == instants[:7]
    assert table.completed_instants() == instants[7:]
    assert hudi_rows(table.base_path, as_of=instants[7]) == [(1, "v7", 7)]


# ----------------------------------------------------------------- the config keys

BASE = {
    "source": {"bootstrap_servers": "localhost:9092", "topics": "^db"},
    "target": {"path": "."},
}


def test_config_retains_by_hours_unless_commits_are_asked_for() -> None:
    from engine.replicator.planning import retention

    cfg = config_from_dict(BASE)
    assert cfg.hudi.clean_retain_hours == DEFAULT_CLEAN_RETAIN_HOURS == 1.0
    assert cfg.hudi.clean_retain_commits is None
    assert retention(cfg) == Retention(hours=1.0)
    cfg = config_from_dict({**BASE, "hudi": {"clean_retain_hours": 6}})
    assert retention(cfg) == Retention(hours=6)
    # The old key still works, as the by-count policy (and Hudi's keep_min rule with it).
    cfg = config_from_dict({**BASE, "hudi": {"clean_retain_commits": 10}})
    assert retention(cfg) == Retention(commits=10)
    for bad, words in (
        ({"clean_retain_commits": 10, "clean_retain_hours": 1}, "not both"),
        ({"clean_retain_commits": 20}, "keep_min_commits (20) must be greater"),
        ({"clean_retain_hours": 0}, "greater than 0"),
        (
            {"clean_retain_hours": 48, "archive_retention_hours": 24},
            "archive_retention_hours (24) must be 0 or at least",
        ),
    ):
        with pytest.raises(ConfigError) as caught:
            config_from_dict({**BASE, "hudi": bad})
        assert words in str(caught.value), (bad, str(caught.value))
    # Archive retention off (0, the default: archive files kept as Hudi keeps them) goes
    # with any window.
    config_from_dict({**BASE, "hudi": {"clean_retain_hours": 48}})
    config_from_dict({**BASE, "hudi": {"clean_retain_hours": 48, "archive_retention_hours": 0}})


def test_init_writes_the_time_policy(tmp_path: Path) -> None:
    text = render_config(
        bootstrap_servers="localhost:9092", topics="^db", target="lake", base_dir=tmp_path
    )
    assert "clean_retain_hours = 1.0" in text
    assert "clean_retain_commits" not in text
