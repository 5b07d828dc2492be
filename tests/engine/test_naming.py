"""Topic -> table name mapping can never leave the target folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import TableNameError
from engine.naming import table_name_for_topic, table_path


@pytest.mark.parametrize(
    ("topic", "name"),
    [
        ("dbserver1.inventory.customers", "inventory_customers"),
        ("inventory.customers", "inventory_customers"),
        ("orders", "orders"),
        ("srv.public.order-lines", "public_order_lines"),
        ("srv.2024.sales", "t_2024_sales"),
        ("srv.....etc..passwd", "etc_passwd"),
        ("../../etc/passwd", "etc_passwd"),
        ("a/../../b", "b"),
    ],
)
def test_names(topic: str, name: str) -> None:
    assert table_name_for_topic(topic) == name


@pytest.mark.parametrize("topic", ["..", "...", "/", "-", "._.", ""])
def test_unusable_topics_are_refused(topic: str) -> None:
    with pytest.raises(TableNameError):
        table_name_for_topic(topic)


@given(st.text(min_size=1, max_size=60))
def test_any_topic_stays_inside_target(topic: str) -> None:
    target = Path("/srv/lake")
    try:
        name = table_name_for_topic(topic)
    except TableNameError:
        return
    path = table_path(target, name)
    assert path.parent == target
    assert name not in ("", ".", "..")


@pytest.mark.parametrize("name", ["..", "../x", "a/b", "."])
def test_table_path_refuses_escaping_names(name: str) -> None:
    with pytest.raises(TableNameError):
        table_path(Path("/srv/lake"), name)
