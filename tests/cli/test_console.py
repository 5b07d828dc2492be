"""JSON output keeps every value exact and readable by JSON tools."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from cdcctl.console import print_json


def test_json_output_keeps_sql_values_exact(capsys) -> None:
    print_json(
        [
            {
                "sum": Decimal("12345678901234567890123"),  # DuckDB's sum of integers
                "price": Decimal("19.99"),
                "precise": Decimal("0.1000000000000000000001"),
                "day": dt.date(2024, 1, 2),
                "at": dt.datetime(2024, 1, 2, 3, 4, 5, 600000),
                "raw": b"\x00\xff",
            }
        ]
    )
    (row,) = json.loads(capsys.readouterr().out)
    assert row == {
        "sum": 12345678901234567890123,
        "price": 19.99,
        "precise": "0.1000000000000000000001",  # no float holds it: exact text
        "day": "2024-01-02",
        "at": "2024-01-02T03:04:05.600000",
        "raw": "AP8=",
    }
