"""Topic -> table name mapping can never leave the target folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import TableNameError
from engine.naming import MAX_NAME, table_key, table_name_for_topic, table_path


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


# ------------------------------------------------------------------ hostile topic names
# Kafka itself allows only [a-zA-Z0-9._-] in topic names; the naming function is driven
# directly with worse, since it is the one place every folder name comes from.


@pytest.mark.parametrize(
    "topic",
    [
        "srv.app.a\x00b",  # NUL
        "srv.app.a\\..\\b",  # backslashes
        'srv.app.x"; DROP VIEW y; --',  # quotes, SQL
        "srv.app.caf\u00e9",  # NFC é
        "srv.app.cafe\u0301",  # NFD e + combining acute
        "srv.app.\u0430dmin",  # Cyrillic а, looks like Latin a
        "srv.app.ａｄｍｉｎ",  # fullwidth
        "srv.app.名前x",
    ],
)
def test_hostile_topics_map_to_plain_ascii_names(topic: str) -> None:
    name = table_name_for_topic(topic)
    assert name.isascii() and name.replace("_", "").isalnum(), name
    assert table_path(Path("/srv/lake"), name).parent == Path("/srv/lake")


def test_normal_forms_are_one_name_and_look_alikes_another() -> None:
    nfc, nfd = table_name_for_topic("s.app.caf\u00e9"), table_name_for_topic("s.app.cafe\u0301")
    assert nfc == nfd == "app_caf"
    assert table_name_for_topic("s.app.ａｄｍｉｎ") == "app_admin"  # NFKC: fullwidth is ASCII
    # A Cyrillic а is not an a: it is not the name of "admin" (and where a look-alike does
    # end on another topic's name, the second topic's table is FAILED: tests/engine/
    # test_hostile_names.py).
    assert table_name_for_topic("s.app.\u0430dmin") == "app_dmin"


def test_case_only_differences_are_one_table() -> None:
    assert table_key(table_name_for_topic("s.Inv.Orders")) == table_key(
        table_name_for_topic("s.inv.orders")
    )


def test_very_long_names_fit_a_folder_name() -> None:
    # 300 bytes of name (and 900 of UTF-8): a folder name holds at most 255 bytes.
    for topic in ("s.app." + "x" * 300, "s.app." + "é" * 300, "s.app." + "ab" * 200 + "é"):
        name = table_name_for_topic(topic)
        assert 0 < len(name.encode()) <= MAX_NAME <= 255


def test_names_cut_to_the_same_length_collide_by_key() -> None:
    a = table_name_for_topic("s.app." + "x" * 200 + "a")
    b = table_name_for_topic("s.app." + "x" * 200 + "b")
    assert table_key(a) == table_key(b)  # so the second topic's table is FAILED


def test_table_path_refuses_a_folder_equal_but_for_case(tmp_path: Path) -> None:
    (tmp_path / "inv_Orders").mkdir()
    assert table_path(tmp_path, "inv_Orders") == tmp_path / "inv_Orders"
    with pytest.raises(TableNameError, match="differs only in case"):
        table_path(tmp_path, "inv_orders")


@pytest.mark.parametrize("name", ["", "a\x00b", "a\\b", 'a"b', "é"])
def test_table_path_refuses_names_naming_did_not_make(name: str) -> None:
    with pytest.raises(TableNameError):
        table_path(Path("/srv/lake"), name)


# ------------------------------------------------------------------ target.table_naming
@pytest.mark.parametrize(
    ("naming", "topic", "name"),
    [
        ("schema_table", "dbserver1.inventory.customers", "inventory_customers"),
        ("prefix_schema_table", "dbserver1.inventory.customers", "dbserver1_inventory_customers"),
        ("prefix_schema_table", "prod.eu.inventory.customers", "prod_eu_inventory_customers"),
        ("prefix_schema_table", "inventory.customers", "inventory_customers"),
        ("{table}", "srv.inventory.customers", "customers"),
        ("{database}__{table}_at_{prefix}", "srv-1.inv.orders", "inv_orders_at_srv_1"),
        ("x{schema}x{table}", "s.caf\u00e9.t", "xcaf_xt"),
        ("{prefix}_{table}", "s.app.\uff41\uff44\uff4d\uff49\uff4e", "s_admin"),
        ("../../{table}", "srv.inv.orders", "orders"),
        ("/etc/{table}/..", "srv.inv.orders", "etc_orders"),
        ("{table}" * 40, "srv.inv.orders", ("orders" * 20)[:MAX_NAME]),
        ("2024_{table}", "srv.inv.orders", "t_2024_orders"),
    ],
)
def test_table_naming(naming: str, topic: str, name: str) -> None:
    assert table_name_for_topic(topic, naming) == name


def test_two_servers_do_not_collide_with_the_prefix() -> None:
    a, b = "srv1.inventory.customers", "srv2.inventory.customers"
    assert table_name_for_topic(a) == table_name_for_topic(b)
    assert table_name_for_topic(a, "prefix_schema_table") != table_name_for_topic(
        b, "prefix_schema_table"
    )


@pytest.mark.parametrize(
    ("naming", "words"),
    [
        ("{table.__class__}", "is not a placeholder"),
        ("{table[0]}", "is not a placeholder"),
        ("{table!r}", "is not a placeholder"),
        ("{table:>300}", "is not a placeholder"),
        ("{0}_{table}", "is not a placeholder"),
        ("{}", "is not a placeholder"),
        ("{user}_{table}", "is not a placeholder"),
        ("{schema}", "has no {table}"),
        ("fixed", "has no {table}"),
        ("{table", "is not a template"),
        ("{table}}", "is not a template"),
    ],
)
def test_hostile_templates_are_refused(naming: str, words: str) -> None:
    from engine.naming import check_naming

    with pytest.raises(ValueError, match=re.escape(words)):
        check_naming(naming)
    with pytest.raises(ValueError):
        table_name_for_topic("srv.inv.orders", naming)


def test_config_refuses_a_bad_template_naming_the_key(tmp_path: Path) -> None:
    from engine.config import config_from_dict
    from engine.errors import ConfigError

    data = {
        "source": {"bootstrap_servers": "127.0.0.1:9092", "topics": "."},
        "target": {"path": str(tmp_path / "lake"), "table_naming": "{table.__init__}"},
    }
    with pytest.raises(ConfigError) as err:
        config_from_dict(data)
    assert [p[0] for p in err.value.problems] == ["target.table_naming"]
    data["target"]["table_naming"] = "{prefix}-{table}"
    assert config_from_dict(data).table_name("a.b.c") == "a_c"


@given(
    st.text(alphabet=st.sampled_from("{}tableprfixschmd._/\\ -\u00e9\uff41"), max_size=30),
    st.text(min_size=1, max_size=40),
)
def test_any_template_output_stays_inside_target(naming: str, topic: str) -> None:
    from engine.naming import check_naming

    try:
        check_naming(naming)
        name = table_name_for_topic(topic, naming)
    except (ValueError, TableNameError):
        return
    path = table_path(Path("/srv/lake"), name)
    assert path.parent == Path("/srv/lake")
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and len(name) <= MAX_NAME + 2
