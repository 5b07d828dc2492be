"""A newcomer's first hour, through the real CLI in child processes.

Each test is one thing a new user tried that once failed: relative paths, a target that
is a file or unwritable, an unreachable broker, ``--version`` and ``--help``, ``init``
without a terminal, and the kept demo followed by ``start`` and ``query``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from engine.hudi.table import HudiTable
from tests.integration.replicas import config_text, read_replica, run_cli
from tests.waiting import wait_until

COMMANDS = (
    "init",
    "start",
    "status",
    "dashboard",
    "pause",
    "resume",
    "stop",
    "resync",
    "delete",
    "deadletters",
    "demo",
    "query",
    "test-connection",
    "validate",
    "repair",
    "explain",
)
#: The query of the README's quick start.
QUICK_START_SQL = (
    "SELECT status, count(*) AS orders, sum(quantity) AS items "
    "FROM inventory_orders GROUP BY status ORDER BY status"
)


def _config(path: Path, target: str, servers: str = "127.0.0.1:1") -> Path:
    path.write_text(config_text(servers, "x", target))
    return path


REPOSITORY = Path(__file__).resolve().parents[2]
#: The lines bootstrap.sh may print itself (the class archive's only when it builds one).
BOOTSTRAP_LINE = re.compile(r"^(bootstrap: |building the Spark class archive|Spark class archive)")


def test_bootstrap_prints_only_its_own_lines(tmp_path: Path) -> None:
    # A version-manager shim that fails loudly, the way pyenv's do when the version is
    # not selected: probing it must not show on the terminal.
    shim = tmp_path / "python3.13"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = f"{tmp_path}:{env['PATH']}"
    r = subprocess.run(
        ["./bootstrap.sh", "test", "--version"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"pytest \S+\n", r.stdout), r.stdout
    noise = [line for line in r.stderr.splitlines() if not BOOTSTRAP_LINE.match(line)]
    assert noise == [], r.stderr


def test_version_prints_the_package_version() -> None:
    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"cdcctl \d+\.\d+\.\d+\S*\n", r.stdout), r.stdout


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_plain_text(command: str | None) -> None:
    r = run_cli(*([command] if command else []), "--help", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "Usage:" in text
    # No type labels ("<bool>", "<list[str]>", "TEXT", "INTEGER"), no rich box drawing,
    # and arguments in the usage line as the README writes them (no {TABLE}, [[TABLE]...]).
    for noise in ("<bool>", "<str>", "<int>", "<path>", "<list", " TEXT", " INTEGER", "╭", "│"):
        assert noise not in text, f"{noise!r} in help:\n{text}"
    assert not re.search(r"\{[A-Z]+\}|\[\[", text), f"an odd argument in help:\n{text}"
    assert all(len(line) <= 80 for line in text.splitlines()), f"wider than 80:\n{text}"
    # No word cut at its hyphen by the wrapping ("[default: debezium-" / "json]").
    assert not re.search(r"\w-$", text, re.M), f"a word cut at 80 columns:\n{text}"
    if command is None:
        for name in COMMANDS:
            assert re.search(rf"^\s+{name}\s+\S", text, re.M), f"{name} missing:\n{text}"
        assert "--version" in text
        commands = text.split("Commands:")[1]
        assert not re.search(r"\.\.\.$", commands, re.M), f"a summary is truncated:\n{text}"


def test_init_without_a_terminal_names_every_missing_flag(tmp_path: Path) -> None:
    out = tmp_path / "c.toml"
    r = run_cli("init", "--output", str(out))
    assert r.returncode == 2
    for flag in ("--bootstrap-servers", "--topics", "--target"):
        assert flag in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
    some = run_cli("init", "--topics", "x", "--output", str(out))
    assert some.returncode == 2 and "--topics" not in some.stderr.split("\n")[0]
    assert "--bootstrap-servers" in some.stderr and "--target" in some.stderr


def test_target_that_is_a_file_is_a_config_error_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "lake").write_text("not a folder")
    cfg = _config(tmp_path / "c.toml", "lake")
    started = time.monotonic()
    r = run_cli("start", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    assert "target.path" in r.stderr and "is a file" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    # Refused before anything ran: no broker contact, no work folder, in seconds.
    assert "connecting to Kafka" not in r.stderr
    assert not (tmp_path / ".cdcctl").exists()
    assert time.monotonic() - started < 20


def test_target_inside_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("")
    cfg = _config(tmp_path / "c.toml", "blocker/lake")
    r = run_cli("start", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    assert "target.path" in r.stderr and "Traceback" not in r.stderr


def _unprivileged() -> list[str]:
    """A prefix that runs a command without the right to write into others' folders.

    Root writes everywhere; dropping the capabilities that let it ignore permissions
    (util-linux ``setpriv``) makes a read-only folder read-only for the CLI too.
    """
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search,-fowner"]


def test_unwritable_target_is_a_config_error(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    lake.chmod(0o555)
    try:
        cfg = _config(tmp_path / "c.toml", "lake")
        r = run_cli("start", "--config", str(cfg), prefix=_unprivileged())
    finally:
        lake.chmod(0o755)
    assert r.returncode == 2, r.stderr
    assert "target.path" in r.stderr and "not writable" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_unreachable_broker_is_reported_within_ten_seconds(tmp_path: Path) -> None:
    cfg = _config(tmp_path / "c.toml", "lake", servers="127.0.0.1:1")
    started = time.monotonic()
    r = run_cli("start", "--config", str(cfg), timeout=120)
    elapsed = time.monotonic() - started
    assert r.returncode == 3, r.stderr
    lines = r.stderr.splitlines()
    # First it says what it tries, then what failed and what to check.
    assert lines[0] == "connecting to Kafka at 127.0.0.1:1 (source.bootstrap_servers)", lines
    assert lines[1].startswith("error: cannot reach Kafka at 127.0.0.1:1"), lines
    # What a plain connection tells: nothing listens there (not a DNS failure).
    assert lines[1].endswith("127.0.0.1:1: connection refused (nothing listens on that port)")
    assert "source.bootstrap_servers" in lines[2], lines
    assert elapsed < 10, f"the unreachable broker took {elapsed:.1f}s to report"


def test_demo_runs_end_to_end_with_a_relative_target(tmp_path: Path) -> None:
    # The one full demo run of the CLI tests (tests/cli/test_cli.py's demo test merged here).
    r = run_cli("demo", "--events", "3000", "--target", "./demolake", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    for table in ("inventory_customers", "inventory_orders", "inventory_products"):
        assert table in r.stdout
        assert (tmp_path / "demolake" / table / ".hoodie" / "hoodie.properties").is_file()
        assert read_replica(tmp_path / "demolake" / table), table
    assert "revenue" in r.stdout
    # Nothing leaked out of the working folder: the work state sits next to the replicas.
    assert sorted(p.name for p in tmp_path.iterdir()) == [".cdcctl", "demolake"]


def _live_changes(config: Path, lake: Path) -> int:
    """How many messages the demo's broker holds past its replicas' checkpoints."""
    from confluent_kafka import Consumer, TopicPartition

    servers = tomllib.loads(config.read_text())["source"]["bootstrap_servers"]
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "first-hour-probe"})
    try:
        waiting = 0
        for table in lake.iterdir():
            topic, *positions = HudiTable.open(table).checkpoint().split(",")
            for position in positions:
                partition, offset = map(int, position.split(":"))
                _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
                waiting += end - offset
        return waiting
    finally:
        consumer.close()


def _processes_under(pid: int) -> list[str]:
    """Names of the processes a process started (and theirs)."""
    return [p.name() for p in psutil.Process(pid).children(recursive=True)]


def test_kept_demo_then_start_then_query(tmp_path: Path, replicator) -> None:
    # Run as the README runs it: the installed script by its path from where one stands.
    script = os.path.relpath(Path(sys.executable).parent / "cdcctl", tmp_path)
    demo = replicator.cli("demo", "--keep", "--events", "3000", cwd=tmp_path, program=[script])
    told = demo.wait_for_output("Ctrl-C here stops the demo", 300, stream="stderr")
    cfg = tmp_path / "cdcctl-demo" / "cdcctl.toml"
    # The hints say the command as it was run, with the config as the README names it.
    assert f"\n  {script} start --config cdcctl-demo/cdcctl.toml\n" in told, told
    assert "`validate` needs the database Debezium read, and the demo has none" in told
    assert cfg.is_file()
    # Its replication is over: no Spark JVM (nor its Python workers) sits idle.
    children = _processes_under(demo.pid)
    assert not [n for n in children if n == "java" or n.startswith("python")], children
    wait_until(
        lambda: _live_changes(cfg, tmp_path / "cdcctl-demo" / "lake"),
        "live changes after the demo's own run",
        60,
        child=demo,
    )

    # As the quick start does it: paths relative to where the user stands.
    relative = "cdcctl-demo/cdcctl.toml"
    started = run_cli(
        "start", "--config", relative, "--until-caught-up", "--json", cwd=tmp_path, timeout=300
    )
    assert started.returncode == 0, started.stderr
    status = {s["table"]: s for s in json.loads(started.stdout)["tables"]}
    assert set(status) == {"inventory_customers", "inventory_orders", "inventory_products"}
    assert all(s["state"] == "STOPPED" for s in status.values()), status
    applied = sum(s["inserts"] + s["updates"] + s["deletes"] for s in status.values())
    assert applied > 0, "the live changes were not replicated"
    # The demo behaves like a live database: its source times are now, so the latency it
    # shows is minutes at most (it was "1047d" with the workload's 2024 clock).
    latencies = [s["latency_p99_s"] for s in status.values() if s["latency_p99_s"] is not None]
    assert latencies and all(0 <= t < 3600 for t in latencies), status

    # The quick start's query, against the replica read back by hudi-rs.
    q = run_cli("query", "--config", relative, "--json", QUICK_START_SQL, cwd=tmp_path)
    assert q.returncode == 0, q.stderr
    rows = read_replica(tmp_path / "cdcctl-demo" / "lake" / "inventory_orders").values()
    expected: dict[str, list[int]] = {}
    for row in rows:
        agg = expected.setdefault(row["status"], [0, 0])
        agg[0] += 1
        agg[1] += row["quantity"]
    assert json.loads(q.stdout) == [
        {"status": status, "orders": n, "items": items}
        for status, (n, items) in sorted(expected.items())
    ]

    bad = run_cli("query", "--config", str(cfg), "SELECT nope FROM inventory_orders")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: ") and "nope" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert demo.stop(signal.SIGINT) == 0, demo.describe()


def test_a_demo_run_with_python_m_says_so_in_its_hints(tmp_path: Path, replicator) -> None:
    demo = replicator.cli("demo", "--keep", "--events", "300", cwd=tmp_path)
    told = demo.wait_for_output("Ctrl-C here stops the demo", 300, stream="stderr")
    assert f"\n  {sys.executable} -m cdcctl start --config cdcctl-demo/cdcctl.toml\n" in told
    broker = [p.pid for p in psutil.Process(demo.pid).children()]
    # SIGTERM (systemd's, timeout's) ends the kept demo as Ctrl-C does, its broker too
    # (it was ignored: the replicator's handler, which asks a run to stop, stayed).
    assert demo.stop(signal.SIGTERM) == 0, demo.describe()
    assert broker and not [p for p in broker if psutil.pid_exists(p)], broker


def test_validate_on_the_demo_says_why_it_cannot(tmp_path: Path) -> None:
    # The kept demo's config names no database: validate says what it needs, at once.
    cfg = tmp_path / "cdcctl.toml"
    cfg.write_text(config_text())
    r = run_cli("validate", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "error: no source database to compare with",
        "  hint: validate compares the replicas with the database Debezium read: give "
        "--source postgresql://user@host:port/db (or mysql://...), or set "
        "source.database_dsn in the config (the demo has none: its events are generated)",
    ], r.stderr


def test_hints_say_cdcctl_when_that_name_on_path_is_this_program(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from cdcctl.commands.demo import invoked_as

    script = Path(sys.executable).parent / "cdcctl"
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, str(script), "demo"])
    monkeypatch.setattr(sys, "argv", [str(script), "demo"])
    monkeypatch.setenv("PATH", str(script.parent))
    assert invoked_as() == "cdcctl"
    monkeypatch.setenv("PATH", str(tmp_path))
    assert invoked_as() == str(script)  # not on PATH: the path as it was typed
