"""`cdcctl validate` renders a replica's dates and timestamps with Arrow's cast to text (fast)
where every value lies in years 1-9999, else with ``strftime`` (slow): both must give the
same characters, and they must be what PostgreSQL's SQL rendering gives."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.validate import canonical as cn

YEAR_1 = -62_135_596_800_000_000  # 0001-01-01T00:00:00 in µs since the epoch
YEAR_10000 = 253_402_300_800_000_000  # 10000-01-01T00:00:00
DAY_US = 86_400_000_000

# Mostly inside years 1-9999 (the fast path), some just outside (the slow path).
micros = st.one_of(
    st.integers(YEAR_1, YEAR_10000 - 1),
    st.integers(YEAR_1 - 400 * 366 * DAY_US, YEAR_1 - 1),
    st.integers(YEAR_10000, YEAR_10000 + 400 * 366 * DAY_US),
    st.sampled_from([YEAR_1, YEAR_10000 - 1, 0, -1, 1]),
)


def _strftime_ts(arr: pa.Array) -> list:
    """The rendering before the fast path (the reference)."""
    naive = arr.cast(pa.timestamp("us")) if arr.type.tz is not None else arr
    return pc.strftime(naive.cast(pa.timestamp("us")), format="%Y-%m-%dT%H:%M:%S").to_pylist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), micros), min_size=1, max_size=20))
def test_timestamp_text_is_strftime_text(values: list[int | None]) -> None:
    for kind, typ in (
        (cn.TS, pa.timestamp("us")),
        (cn.TSTZ, pa.timestamp("us", tz="UTC")),
        (cn.TSTZ, pa.timestamp("us", tz="+02:00")),
    ):
        arr = pa.array(values, pa.int64()).cast(typ)
        assert cn.replica_text(arr, kind).to_pylist() == _strftime_ts(arr), (kind, typ)
    # Millisecond replicas (MySQL datetime(3), say) are rendered to the microsecond too.
    ms = pa.array([None if v is None else v // 1000 for v in values], pa.int64())
    arr = ms.cast(pa.timestamp("ms"))
    assert cn.replica_text(arr, cn.TS).to_pylist() == _strftime_ts(arr)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), micros), min_size=1, max_size=20))
def test_date_text_is_strftime_text(values: list[int | None]) -> None:
    days = pa.array([None if v is None else v // DAY_US for v in values], pa.int32())
    arr = days.cast(pa.date32())
    reference = pc.strftime(arr.cast(pa.timestamp("s")), format="%Y-%m-%d").to_pylist()
    assert cn.replica_text(arr, cn.DATE).to_pylist() == reference


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(YEAR_1, YEAR_10000 - 1), min_size=1, max_size=50))
def test_fast_texts_are_postgres_texts(scratch_postgres, values: list[int]) -> None:
    """The fast path's text is what PostgreSQL's canonical SQL renders for the same
    timestamp, timestamptz and date."""
    conn = scratch_postgres.connect()
    try:
        conn.execute("SET TIME ZONE 'UTC'")
        ts = cn.pg_text("c", cn.TS, "timestamp")
        tstz = cn.pg_text("z", cn.TSTZ, "timestamptz")
        day = cn.pg_text("d", cn.DATE, "date")
        # Whole days and the microseconds left: no step goes through a double.
        span = "(u / 86400000000) * interval '1 day' + (u %% 86400000000) * interval '1 us'"
        rows = conn.execute(
            f"SELECT {ts}, {tstz}, {day} FROM (SELECT "
            f"timestamp '2000-01-01' + {span} AS c, "
            f"timestamptz '2000-01-01+00' + {span} AS z, "
            f"(timestamp '2000-01-01' + {span})::date AS d, o "
            "FROM unnest(%s::bigint[]) WITH ORDINALITY AS v(u, o)) t ORDER BY o",
            ([v - 946_684_800_000_000 for v in values],),
        ).fetchall()
    finally:
        conn.close()
    micro = pa.array(values, pa.int64())
    days = pa.array([v // DAY_US for v in values], pa.int32()).cast(pa.date32())
    assert cn.replica_text(micro.cast(pa.timestamp("us")), cn.TS).to_pylist() == [
        r[0] for r in rows
    ]
    assert cn.replica_text(micro.cast(pa.timestamp("us", tz="UTC")), cn.TSTZ).to_pylist() == [
        r[1] for r in rows
    ]
    assert cn.replica_text(days, cn.DATE).to_pylist() == [r[2] for r in rows]
