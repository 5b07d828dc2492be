"""The configuration reference and ``cdcctl init``'s file come from the config model."""

from __future__ import annotations

import tomllib

from engine.config import Config, render_config
from engine.config.base import file_fields, marks, section_of
from engine.config.reference import BEGIN, COMMAND, END, PAGE, table, updated


def test_the_committed_reference_is_current() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert updated(page) == page, f"{PAGE.name} is stale: run {COMMAND}"


def test_a_stale_reference_is_noticed() -> None:
    # The check itself can fail: a row edited by hand, or a row missing, is a change.
    page = PAGE.read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if line.startswith("| `hudi.num_buckets`"))
    assert updated(page.replace(row, row.replace("`8`", "`16`"))) == page
    assert updated(page.replace(row + "\n", "")) == page
    assert page.count(BEGIN) == 1 and page.count(END) == 1


def test_every_setting_has_one_row_with_its_default() -> None:
    rows = table().splitlines()
    keys = ["source.bootstrap_servers", "source.sasl_password", "source.max_nesting_depth"]
    keys += ["source.schema_registry.url", "hudi.keep_max_commits", "tables.<name>.keyless"]
    for key in keys:
        assert len([row for row in rows if row.startswith(f"| `{key}` |")]) == 1, key
    assert "| `source.max_nesting_depth` | `64` |" in "\n".join(rows)
    assert "| `source.bootstrap_servers` | required |" in "\n".join(rows)


def test_init_writes_the_marked_keys_with_the_models_defaults() -> None:
    text = render_config(bootstrap_servers="h:1", topics="^db", target="lake")
    written = tomllib.loads(text)
    marked = 0
    for name, field in Config.model_fields.items():
        section = section_of(field)
        if section is None or name == "tables":
            continue
        for key, setting in file_fields(section):
            mark = marks(setting)
            if "init" not in mark:
                assert key not in written.get(name, {}) or name == "source", (name, key)
                continue
            marked += 1
            if not setting.is_required():
                assert written[name][key] == setting.get_default(call_default_factory=True)
            if mark["init"]:
                assert f"# {mark['init']}" in text, (name, key)
    assert marked >= 12
    assert written["source"]["bootstrap_servers"] == "h:1" and written["target"]["path"] == "lake"
