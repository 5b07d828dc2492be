"""The pure parts of ``cdcctl explain``: ``--since``, positions as databases name them,
composite keys."""

from __future__ import annotations

import datetime as dt

import pytest

from engine.errors import ConfigError
from engine.explain import parse_since, position_text, record_key
from engine.model import NO_POS, STREAMED_BIT

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
NOW_MS = int(NOW.timestamp() * 1000)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("90s", NOW_MS - 90_000),
        ("30m", NOW_MS - 1_800_000),
        ("2h", NOW_MS - 7_200_000),
        ("7d", NOW_MS - 7 * 86_400_000),
        ("2026-11-29T11:00:00Z", NOW_MS - 3_600_000),
        ("2026-11-29T11:00:00", NOW_MS - 3_600_000),  # no zone: UTC
        ("20261129110000000", NOW_MS - 3_600_000),
    ],
)
def test_since_is_a_duration_back_an_iso_time_or_an_instant(text: str, ms: int) -> None:
    assert parse_since(text, NOW) == ms


@pytest.mark.parametrize("text", ["yesterday", "5 weeks", "-3h", ""])
def test_since_refuses_anything_else_with_what_to_give(text: str) -> None:
    with pytest.raises(ConfigError, match="neither a duration") as refused:
        parse_since(text, NOW)
    assert "30m" in refused.value.hint


def test_positions_read_as_each_database_names_them() -> None:
    lsn = (0x16 << 32) | 0xB3748
    streamed = STREAMED_BIT | lsn
    assert position_text("postgresql", streamed, lsn) == "LSN 16/B3748"
    # Events of one transaction order by its commit; the event's own LSN is shown first.
    assert position_text("postgresql", STREAMED_BIT | (lsn + 8), lsn) == (
        "LSN 16/B3748 (commit 16/B3750)"
    )
    assert position_text("postgresql", lsn, lsn) == "snapshot, LSN 16/B3748"
    assert position_text("postgresql", streamed, -1) == "LSN 16/B3748, repair"
    binlog = STREAMED_BIT | (3 << 32) | 1234
    assert position_text("mysql", binlog, 2) == "binlog 000003:1234 row 2"
    assert position_text("mariadb", (3 << 32) | 1234, 0) == "snapshot, binlog 000003:1234 row 0"
    assert position_text(None, STREAMED_BIT | 17, 4) == "17:4"
    assert position_text("postgresql", NO_POS, 0) == "no position"
    assert position_text("postgresql", None, None) == "no position"


def test_composite_keys_are_given_as_stored_or_by_name() -> None:
    fields = ["order_id", "line"]
    assert record_key("order_id=7,line=3", fields) == "order_id:7,line:3"
    assert record_key("line=3,order_id=7", fields) == "order_id:7,line:3"  # key order
    assert record_key("order_id:7,line:3", fields) == "order_id:7,line:3"
    assert record_key("a=1", ["id"]) == "a=1"  # one key column: the value as it is
    assert record_key("order_id=7", fields) == "order_id=7"  # not every column named
