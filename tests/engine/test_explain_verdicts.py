"""explain's verdicts against the independent fold (tests/oracle.py ``fold_verdicts``), on
random streams: disorder, replays, deletes with and without their tombstones, late
deletes, truncates and TOAST placeholders, decoded by the real decoder."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.decode import RecordBatch, decode_debezium_json
from engine.explain import _events, _judge, _State
from engine.explain.topic import KAFKA_TS, TopicRead
from engine.merge.toast import DEFAULT_TOAST
from tests import builders
from tests.oracle import TOAST_PLACEHOLDER, fold_verdicts

TOPIC = "srv.app.t"
COLS = [("id", "int32"), ("name", "string"), ("qty", "int32")]

# One step: (kind, key, lsn, toast). Kinds: an upsert, a delete (with or without the
# tombstone the connector sends after it), a truncate, or the step before sent again.
step = st.tuples(
    st.sampled_from(["c", "u", "u", "d", "dx", "t", "again"]),
    st.integers(1, 3),
    st.integers(1, 60),
    st.booleans(),
)


def _messages(steps: list[tuple[str, int, int, bool]]) -> list[tuple]:
    out: list[tuple] = []
    for kind, key, lsn, toast in steps:
        if kind == "again":
            if out:
                out.append(out[-1])
            continue
        if kind == "t":
            out.append((TOPIC, None, builders.value("t", lsn, None, COLS)))
            continue
        op = "d" if kind.startswith("d") else kind
        name = TOAST_PLACEHOLDER if toast else f"n{lsn}"
        after = None if op == "d" else {"id": key, "name": name, "qty": lsn}
        out.append((TOPIC, builders.key(key), builders.value(op, lsn, after, COLS)))
        if kind == "dx":
            out.append((TOPIC, builders.key(key), None))
    return out


@st.composite
def streams(draw: st.DrawFn) -> list[tuple[str, int, int, bool]]:
    """Steps in any order of their positions (each change has a position of its own, as
    a database gives it: only a step sent again repeats one)."""
    steps = draw(st.lists(step, min_size=1, max_size=25))
    positions = draw(st.permutations(range(1, len(steps) + 1)))
    return [(k, key, p, toast) for (k, key, _, toast), p in zip(steps, positions, strict=True)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_verdicts_follow_the_fold(steps) -> None:
    messages = _messages(steps)
    n = len(messages)
    if n == 0:
        return
    decoded = decode_debezium_json(
        RecordBatch(
            TOPIC, [m[1] for m in messages], [m[2] for m in messages], [0] * n, list(range(n))
        )
    )
    assert not decoded.bad and decoded.batch is not None
    rows = decoded.batch.append_column(KAFKA_TS, pa.array([-1] * decoded.batch.num_rows))
    read = TopicRead(TOPIC, {0: (0, n)}, {0: 0}, n, False, rows)
    everything = SimpleNamespace(of=lambda _p, _o: "1")  # one commit consumed every event
    for key in ("1", "2", "3"):
        events, flags = _events(read, key, "postgresql", everything, DEFAULT_TOAST)
        _judge(events, flags, _State())
        assert [(e.op, e.verdict) for e in events] == fold_verdicts(messages, key), key
