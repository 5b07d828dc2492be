"""A replication SLO's compliance against an independent fold of the judgements: the
ledger the replicator keeps in memory, and the same segments written to the state store
and read back by ``status``'s reader."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.state.slo import GAP_S, Segment, SloGoal, SloLedger, compliance, span_text
from engine.state.store import StateStore


def oracle(judgements: list[tuple[float, bool]], now: float, window: float) -> float:
    """Between two judgements at most GAP_S apart the table is as the first said; time
    with no judgement (a longer gap: no replicator) is out; before the first, not
    counted."""
    start = max(now - window, judgements[0][0])
    ok = 0.0
    for (t0, good), (t1, _) in zip(judgements, judgements[1:], strict=False):
        if good and t1 - t0 <= GAP_S:
            ok += max(min(t1, now) - max(t0, start), 0.0)
    return ok / (now - start)


steps = st.lists(
    st.tuples(
        st.one_of(st.floats(0.1, 5.0), st.floats(GAP_S + 0.1, 200.0)),  # judged, or a gap
        st.booleans(),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps=steps, window=st.floats(10.0, 600.0), tail=st.floats(0.1, 5.0))
def test_compliance_is_the_fold_of_the_judgements(steps, window: float, tail: float) -> None:
    t = 1_000.0
    judgements = []
    ledger = SloLedger(window)
    for gap, good in steps:
        t += gap
        judgements.append((t, good))
        ledger.judge("t", t, good)
    now = t + tail
    judgements.append((now, judgements[-1][1]))  # the judgement at "now"
    ledger.judge("t", now, judgements[-1][1])
    expected = oracle(judgements, now, window)
    got = ledger.compliance("t", now)
    assert got is not None and abs(got - expected) < 1e-9, (got, expected)
    assert all(s.end >= now - window for s in ledger.segments["t"])  # older ones pruned


def test_segments_read_back_from_the_store_give_the_same_compliance(tmp_path: Path) -> None:
    """In 20 s, out 30 s, in 10 s, 60 s without a replicator (unjudged: out), in 20 s."""
    store = StateStore(tmp_path / "state.db")
    ledger = SloLedger(100.0)
    t = 0.0
    plan = [(True, 20), (False, 30), (True, 10)]
    for good, seconds in plan:
        for _ in range(seconds):
            t += 1.0
            ledger.judge("orders", t, good)
    t += 60.0  # the replicator was not running
    for _ in range(20):
        t += 1.0
        ledger.judge("orders", t, True)
    with store.transaction() as db:
        store.put_slo_goal(db, 90.0, 5.0, 100.0)
        for s in ledger.segments["orders"]:
            store.put_slo_segment(db, "orders", s.start, s.end, s.ok)
    goal, segments, first = store.slo()
    assert goal == (90.0, 5.0, 100.0)
    read = compliance((Segment(*s) for s in segments["orders"]), t, 100.0, first["orders"])
    assert read == ledger.compliance("orders", t)
    # The window is [40, 140]: out until the flip at 51, in 51..60, unjudged 60..121 (the
    # replicator was not running: out), in 121..140: 9 + 19 seconds of 100.
    assert read is not None and abs(read - 0.28) < 1e-9, read
    store.close()


def test_the_goal_and_its_window_read_as_configured() -> None:
    goal = SloGoal(99.0, 60.0, 86400.0)
    assert goal.describe() == "99% of the time within 60 s"
    assert [span_text(s) for s in (86400, 7 * 86400, 1800, 45)] == ["24h", "7d", "30m", "45s"]
