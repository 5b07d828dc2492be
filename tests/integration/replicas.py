"""Helpers shared by the end-to-end tests: run the real CLI, compare replicas to the oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import hudi
import pyarrow as pa

from engine.hudi.schema import conform
from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic

META = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)


def write_config(
    path: Path,
    bootstrap: str,
    topics: str,
    target: Path,
    *,
    tolerance: str | None = None,
    source: dict | None = None,
    **replicator,
) -> Path:
    """A config file as `cdcctl init` would write it, plus replicator overrides
    (``tolerance``: errors.tolerance; ``source``: more [source] keys)."""
    lines = [
        "[source]",
        f'bootstrap_servers = "{bootstrap}"',
        f"topics = '{topics}'",
        *(f"{k} = {v!r}" for k, v in (source or {}).items()),
        "[target]",
        f'path = "{target}"',
        "[hudi]",
        "num_buckets = 4",
        "[replicator]",
        f'work_dir = "{target.parent / "work"}"',
    ]
    lines += [f"{k} = {v!r}" for k, v in replicator.items()]
    if tolerance is not None:
        lines += ["[errors]", f"tolerance = {tolerance!r}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    cwd: Path | None = None,
    prefix: list[str] | None = None,
) -> subprocess.CompletedProcess:
    """Run `cdcctl` in a child process (so it can be SIGKILLed like the real thing).

    ``prefix`` runs it under another program (e.g. ``setpriv`` to drop privileges).
    """
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "cdcctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


def status_tables(config: Path) -> dict[str, dict]:
    """``cdcctl status --json``'s records by table name (the command must succeed)."""
    done = run_cli("status", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return {t["table"]: t for t in json.loads(done.stdout)["tables"]}


def validate_tables(config: Path, dsn: str) -> dict[str, dict]:
    """``cdcctl validate --json`` against ``dsn``: reports by table (exit 0 or 1: equal or
    not; anything else fails the test)."""
    done = run_cli("validate", "--config", str(config), "--source", dsn, "--json")
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-3000:]
    return {r["table"]: r for r in json.loads(done.stdout)}


def read_replica(path: Path) -> dict[str, dict]:
    """Rows of a replica read by hudi-rs, keyed by record key, without Hudi/cdc columns."""
    batches = hudi.HudiTable(str(path)).read()
    if not batches:
        return {}
    # hudi-rs labels naive timestamps UTC (no Avro type it reads means "naive"); restore
    # the exact types from the schema stored in the commit, never shifting values.
    table = conform(pa.Table.from_batches(batches), HudiTable.open(path).arrow_schema())
    rows = {}
    for row in table.to_pylist():
        key = row.pop("_hoodie_record_key")
        assert key not in rows, f"duplicate live row for key {key} in {path}"
        rows[key] = {k: v for k, v in row.items() if k not in META and not k.startswith("_cdc_")}
    return rows


def assert_replicas_match(target: Path, expected: dict[str, dict[str, dict]]) -> dict[str, int]:
    """Every topic's replica equals the oracle's table; returns row counts per table."""
    counts = {}
    for topic, rows in expected.items():
        path = target / table_name_for_topic(topic)
        # A table being created has its folder before its hoodie.properties: not yet a table.
        actual = read_replica(path) if (path / ".hoodie" / "hoodie.properties").exists() else {}
        missing = expected_keys = set(rows)
        missing = expected_keys - set(actual)
        extra = set(actual) - expected_keys
        assert not missing and not extra, (
            f"{topic}: {len(missing)} rows missing (e.g. {sorted(missing)[:5]}), "
            f"{len(extra)} unexpected (e.g. {sorted(extra)[:5]})"
        )
        diffs = [k for k in rows if rows[k] != actual[k]]
        assert not diffs, (
            f"{topic}: {len(diffs)} rows differ, e.g. {diffs[0]}: "
            f"expected {rows[diffs[0]]} got {actual[diffs[0]]}"
        )
        counts[topic] = len(actual)
    return counts


def applied_counts(path: Path) -> dict[str, int]:
    """What every completed commit of a table says it applied (``cdcctl.counts``), added
    up over the active and the archived timeline."""
    from engine.hudi.archive import list_archives, read_archive
    from engine.hudi.timeline import WRITE_ACTIONS

    table = HudiTable.open(path)
    instants = set(table.completed_instants())
    archived = path / ".hoodie" / "archived"
    for _, name, _ in list_archives(archived):
        for entry in read_archive(archived / name):
            if entry.action in WRITE_ACTIONS and entry.state == "COMPLETED":
                instants.add(entry.instant)
    total: dict[str, int] = {}
    for instant in instants:
        counts = json.loads(table.commit_metadata(instant)["extraMetadata"]["cdcctl.counts"])
        for name, value in counts.items():
            total[name] = total.get(name, 0) + value
    return total
