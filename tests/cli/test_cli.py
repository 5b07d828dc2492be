"""The CLI through its real entry point: exit codes, stdout/stderr, no tracebacks.

(The demo's run is checked once, in tests/cli/test_first_hour.py.)"""

from __future__ import annotations

import os
from pathlib import Path

from tests.integration.replicas import config_text, run_cli


def test_init_writes_a_valid_config(tmp_path: Path) -> None:
    out = tmp_path / "cdcctl.toml"
    r = run_cli(
        "init",
        "--bootstrap-servers",
        "127.0.0.1:9092",
        "--topics",
        r"^db\.inv\.",
        "--target",
        "./lake",
        "--output",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert 'bootstrap_servers = "127.0.0.1:9092"' in text and "[target]" in text
    again = run_cli(
        "init", "--bootstrap-servers", "h:1", "--topics", "x", "--target", "t", "--output", str(out)
    )
    assert again.returncode == 2 and "already exists" in again.stderr


def test_init_without_terminal_needs_flags(tmp_path: Path) -> None:
    r = run_cli("init", "--output", str(tmp_path / "c.toml"))
    assert r.returncode == 2
    assert "--topics" in r.stderr and "Traceback" not in r.stderr


def test_bad_config_is_refused_before_anything_runs(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[source]\nbootstrap_servers = "nohost"\ntopics = "(("\n')
    r = run_cli("start", "--config", str(cfg))
    assert r.returncode == 2
    assert "source.bootstrap_servers" in r.stderr and "source.topics" in r.stderr
    assert "target" in r.stderr and "Traceback" not in r.stderr


def test_every_config_problem_missing_secrets_included_is_reported_in_one_error(
    tmp_path: Path,
) -> None:
    # Three different mistakes: an unknown key, a value out of range, and a secret
    # reference naming an unset variable. All are listed by one run, none hides another.
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[source]\nbootstrap_servers = "127.0.0.1:9092"\ntopics = "x"\n'
        'sasl_password = "${env:CDCCTL_TEST_UNSET_PW}"\n'
        '[target]\npath = "lake"\n[hudi]\nnum_buckets = 0\n[replicator]\nbatch_size = 5\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "CDCCTL_TEST_UNSET_PW"}
    r = run_cli("status", "--config", str(cfg), env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("error: ") == 1 and "is not a valid cdcctl config" in r.stderr
    problems = [line for line in r.stderr.splitlines() if line.startswith("  - ")]
    assert len(problems) == 3, r.stderr
    assert "  - hudi.num_buckets: Input should be greater than or equal to 1" in problems
    assert any(
        p.startswith("  - replicator.batch_size: ") and "remove this key" in p for p in problems
    )
    assert (
        "  - source.sasl_password = ${env:CDCCTL_TEST_UNSET_PW}: environment variable "
        "CDCCTL_TEST_UNSET_PW is not set" in r.stderr
    )
    assert "Traceback" not in r.stderr


def test_a_mistyped_key_is_answered_with_the_key_it_is_close_to(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[source]\nbootstrap_server = "127.0.0.1:9092"\ntopics = "x"\n[target]\npath = "lake"\n'
        "[replicator]\nmax_batch_event = 5\nfrobnicate = 1\n"
        '[tables.orders]\nkey_field = ["id"]\n'
    )
    r = run_cli("status", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    problems = [line for line in r.stderr.splitlines() if line.startswith("  - ")]
    assert (
        "  - source.bootstrap_server: not a known setting "
        "(fix: did you mean `source.bootstrap_servers`?)" in problems
    ), r.stderr
    assert (
        "  - replicator.max_batch_event: not a known setting "
        "(fix: did you mean `replicator.max_batch_events`?)" in problems
    ), r.stderr
    assert (
        "  - tables.orders.key_field: not a known setting "
        "(fix: did you mean `tables.orders.key_fields`?)" in problems
    ), r.stderr
    assert "  - replicator.frobnicate: not a known setting (fix: remove this key)" in problems
    assert "Extra inputs" not in r.stderr and "Traceback" not in r.stderr


def test_help_answers_h_and_shows_plain_usage() -> None:
    for args in (["-h"], ["pause", "-h"], ["resume", "--help"], ["start", "-h"]):
        r = run_cli(*args)
        assert r.returncode == 0, (args, r.stderr)
        assert r.stdout.startswith("Usage: "), (args, r.stdout)
    usage = run_cli("pause", "-h").stdout.splitlines()[0]
    assert usage.endswith(" pause [OPTIONS] [TABLE]..."), usage
    for command, arguments in (
        ("resync", "TABLE"),
        ("query", "SQL"),
        ("deadletters", "[TABLE | replay TABLE]"),
    ):
        usage = run_cli(command, "-h").stdout.splitlines()[0]
        assert usage.endswith(f" {command} [OPTIONS] {arguments}"), usage
    assert "quitting asks whether to stop" in " ".join(run_cli("start", "-h").stdout.split())


def test_unreachable_broker_is_a_clear_runtime_error(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(config_text())
    r = run_cli("start", "--config", str(cfg), "--until-caught-up", timeout=120)
    assert r.returncode == 3, r.stderr
    assert "cannot reach Kafka" in r.stderr and "Traceback" not in r.stderr
    assert "Broker transport failure" in r.stderr and "KafkaError{" not in r.stderr
    # librdkafka's own retry lines ("%3|...|FAIL|...") go to a logger, not the terminal.
    assert not [line for line in r.stderr.splitlines() if line.startswith("%")], r.stderr


def test_a_broker_host_name_that_does_not_resolve_is_told_apart(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(config_text("no-such-host.invalid:9092"))
    r = run_cli("start", "--config", str(cfg), timeout=120)
    assert r.returncode == 3, r.stderr
    error = next(line for line in r.stderr.splitlines() if line.startswith("error: "))
    assert error.startswith("error: cannot reach Kafka at no-such-host.invalid:9092"), error
    assert error.endswith("no-such-host.invalid: the host name does not resolve (DNS)"), error
    assert "connection refused" not in r.stderr and "Traceback" not in r.stderr


def test_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(config_text())
    r = run_cli("start", "--config", str(cfg), env={"PATH": str(tmp_path), "JAVA_HOME": ""})
    assert r.returncode == 3
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines[0] == "error: no Java found: Spark needs Java 17 or newer"
    assert "openjdk-17-jre-headless" in lines[1] and "Traceback" not in r.stderr
