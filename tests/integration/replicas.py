"""Helpers shared by the end-to-end tests: run the real CLI, compare replicas to the oracle."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

import hudi
import pyarrow as pa

from engine.hudi.schema import conform
from engine.hudi.table import HudiTable
from engine.naming import table_name_for_topic
from engine.playground.broker import produce_messages
from engine.storage import ObjectStorage, Storage
from tests.oracle import fold

META = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)


def _toml(value: object) -> str:
    """A Python value as a TOML value (strings as literal strings when they can be)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'" if "'" not in value and "\n" not in value else json.dumps(value)
    if isinstance(value, Path):
        return _toml(str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return repr(value)


def config_text(
    bootstrap: str = "127.0.0.1:1",
    topics: str = "x",
    target: Path | str = "lake",
    *,
    work_dir: Path | str | None = None,
    source: dict | None = None,
    target_keys: dict | None = None,
    hudi: dict | None = None,
    tolerance: str | None = None,
    spark: dict | None = None,
    **replicator,
) -> str:
    """The one builder of test config files: the minimal config (``[source]`` with
    ``bootstrap_servers`` and ``topics``, ``[target]`` with ``path``), plus ``source``,
    ``target_keys``, ``hudi``, ``spark`` and replicator keys (``work_dir`` among them) as
    given, and ``tolerance`` as ``[errors] tolerance``. Keys left out take the product's
    defaults."""
    sections = {
        "source": {"bootstrap_servers": bootstrap, "topics": topics, **(source or {})},
        "target": {"path": target, **(target_keys or {})},
        "hudi": hudi or {},
        "replicator": {"work_dir": work_dir, **replicator},
        "errors": {"tolerance": tolerance},
        "spark": spark or {},
    }
    lines = []
    for name, keys in sections.items():
        keys = {k: v for k, v in keys.items() if v is not None}
        if keys:
            lines += [f"[{name}]", *(f"{k} = {_toml(v)}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"


def write_config(
    path: Path,
    bootstrap: str,
    topics: str,
    target: Path | str,
    *,
    hudi: dict | None = None,
    **options,
) -> Path:
    """A replicator test's config file at ``path``: :func:`config_text` with the work folder
    beside ``target`` (a folder; give ``work_dir`` for a bucket) and four buckets unless
    ``hudi`` says otherwise."""
    if "work_dir" not in options:
        options["work_dir"] = Path(target).parent / "work"
    text = config_text(
        bootstrap, topics, target, hudi={"num_buckets": 4, **(hudi or {})}, **options
    )
    path.write_text(text)
    return path


def produced_config(broker, prefix: str, folder: Path, messages: list, **options) -> Path:
    """Create the topics of ``messages`` (topic, key, value) and produce them, then write
    ``folder/cdcctl.toml`` replicating the topics of ``prefix`` into ``folder/lake``."""
    broker.create_topics(sorted({t for t, _, _ in messages}))
    produce_messages(broker.bootstrap_servers, messages)
    pattern = f"^{re.escape(prefix)}\\."
    return write_config(
        folder / "cdcctl.toml", broker.bootstrap_servers, pattern, folder / "lake", **options
    )


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


def checks_of(run: subprocess.CompletedProcess) -> dict[str, dict]:
    """The checks ``cdcctl test-connection --json`` printed, by name (and no traceback
    on its stderr)."""
    assert "Traceback" not in run.stderr, run.stderr
    return {c["name"]: c for c in json.loads(run.stdout)["checks"]}


class CliChild:
    """``cdcctl <args>`` running in a child process (so it can be signalled and SIGKILLed
    like the real thing), its stdout and stderr read continuously by two threads: the
    child never blocks on a full pipe, and :meth:`describe` shows what it printed so far.

    Tests start it through the ``replicator`` fixture (tests/conftest.py), which kills it
    at the test's end and adds its output to the report of a failed test; pass it as
    ``child=`` to :func:`tests.waiting.wait_until` to fail at once if it exits.
    """

    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        prefix: list[str] | None = None,
        program: list[str] | None = None,
        tee: Path | None = None,
        tee_stderr: bool = False,
    ) -> None:
        """``program``: how cdcctl is run (default: this interpreter with ``-m cdcctl``;
        e.g. the installed ``cdcctl`` script, as the README runs it). ``tee``: the child
        leads a process group of its own, and its stdout (with ``tee_stderr`` its stderr
        too) goes through ``tee FILE`` in that group, as in ``cdcctl start | tee FILE`` on
        a terminal: :meth:`signal_group` then reaches both, as Ctrl-C does, and ``tee``'s
        output is what :attr:`stdout` reads."""
        self.args = args
        self.proc = subprocess.Popen(
            [*(prefix or []), *(program or [sys.executable, "-m", "cdcctl"]), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if tee_stderr else subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            process_group=0 if tee is not None else None,
        )
        assert self.proc.stdout is not None
        out = self.proc.stdout
        #: The ``tee`` reading the child's stdout (``tee``), in the child's process group.
        self.tee: subprocess.Popen | None = None
        if tee is not None:
            self.tee = subprocess.Popen(
                ["tee", str(tee)],
                stdin=self.proc.stdout,
                stdout=subprocess.PIPE,
                text=True,
                process_group=self.proc.pid,
            )
            self.proc.stdout.close()  # tee alone reads it: when tee ends, writes fail
            assert self.tee.stdout is not None
            out = self.tee.stdout
        self._lock = threading.Lock()
        self._out: list[str] = []
        self._err: list[str] = []
        pipes = [(out, self._out)]
        if self.proc.stderr is not None:
            pipes.append((self.proc.stderr, self._err))
        self._readers = [
            threading.Thread(target=self._drain, args=(pipe, into), daemon=True)
            for pipe, into in pipes
        ]
        for reader in self._readers:
            reader.start()

    def _drain(self, pipe: IO[str], into: list[str]) -> None:
        for line in iter(pipe.readline, ""):
            with self._lock:
                into.append(line)
        pipe.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    @property
    def stdout(self) -> str:
        with self._lock:
            return "".join(self._out)

    @property
    def stderr(self) -> str:
        with self._lock:
            return "".join(self._err)

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout: float = 60) -> int:
        """Its exit code, once it has exited by itself and its output is read."""
        code = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(10)  # a grandchild holding the pipe open does not hold the test
        return code

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send ``sig`` (unless it has exited) and wait for its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the child's process group (made with ``tee``), as a terminal's
        Ctrl-C, ``timeout -s TERM`` or a service manager do."""
        assert self.tee is not None, "signal_group needs a CliChild made with tee="
        os.killpg(self.proc.pid, sig)

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)

    def wait_for_output(self, needle: str, timeout: float = 120, stream: str = "stdout") -> str:
        """The child's ``stream`` text once it contains ``needle``."""
        from tests.waiting import wait_until

        return wait_until(
            lambda: needle in (text := getattr(self, stream)) and text,
            f"{needle!r} on the child's {stream}",
            timeout,
            child=self,
        )

    def describe(self, chars: int = 6000) -> str:
        """The command, its exit code, and the end of what it printed."""
        code = self.proc.poll()
        state = "running" if code is None else f"exit code {code}"
        return (
            f"cdcctl {' '.join(self.args)} (pid {self.pid}, {state})\n"
            f"--- stdout (last {chars} characters) ---\n{self.stdout[-chars:]}\n"
            f"--- stderr (last {chars} characters) ---\n{self.stderr[-chars:]}"
        )

    def close(self) -> None:
        """Kill it (and its tee) if it still runs (a test's end)."""
        if self.proc.poll() is None:
            self.kill()
        if self.tee is not None and self.tee.poll() is None:
            self.tee.kill()
            self.tee.wait()


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


def read_replica(path: Path | Storage) -> dict[str, dict]:
    """Rows of a replica read by hudi-rs, keyed by record key, without Hudi/cdc columns
    (``path``: its folder, or its store: hudi-rs reads a bucket itself)."""
    if isinstance(path, ObjectStorage):
        batches = hudi.HudiTable(path.url, path.reader_options()).read()
    else:
        path = path.local_path("") if isinstance(path, Storage) else path
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


def replica_rows(path: Path) -> dict[str, dict]:
    """:func:`read_replica` of a table that may not have its first commit yet ({} until
    then), for waiting on a live replicator."""
    if not (path / ".hoodie" / "hoodie.properties").exists():
        return {}
    if not HudiTable.open(path).completed_instants():
        return {}
    return read_replica(path)


def assert_replicas_match(
    target: Path | Storage, expected: dict[str, dict[str, dict]]
) -> dict[str, int]:
    """Every topic's replica in ``target`` (a folder or a store) equals the oracle's
    table; returns row counts per table."""
    counts = {}
    for topic, rows in expected.items():
        name = table_name_for_topic(topic)
        path = target.under(name) if isinstance(target, Storage) else target / name
        # A table being created has its folder before its hoodie.properties: not yet a table.
        actual = read_replica(path) if HudiTable.exists(path) else {}
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


def assert_checkpoints_hold(
    target: Path | Storage,
    by_topic: dict[str, list],
    skip: Callable[[Path | Storage], bool] = lambda table: False,
) -> None:
    """After a crash: every table in ``target`` equals the oracle's fold of exactly the
    messages its newest commit's checkpoint covers (``by_topic``: each topic's messages
    in offset order), and its commits' counters add up to its rows (nothing counted
    twice). Tables not made yet, and those ``skip`` names, are left out."""
    for topic, msgs in by_topic.items():
        name = table_name_for_topic(topic)
        table = target.under(name) if isinstance(target, Storage) else target / name
        if not HudiTable.exists(table) or skip(table):
            continue
        checkpoint = HudiTable.open(table).checkpoint()
        applied = int(checkpoint.rsplit(":", 1)[1]) if checkpoint else 0
        rows = assert_replicas_match(target, {topic: fold(msgs[:applied]).get(topic, {})})
        done = applied_counts(table)
        live = done.get("inserts", 0) - done.get("deletes", 0) - done.get("truncated", 0)
        assert live == rows[topic], (topic, done, rows)


def applied_counts(path: Path | Storage) -> dict[str, int]:
    """What every completed commit of a table (its folder or store) says it applied
    (``cdcctl.counts``), added up over the active and the archived timeline."""
    from engine.hudi.archive import archives_in, read_archive
    from engine.hudi.timeline import WRITE_ACTIONS
    from engine.storage import LocalStorage

    store = path if isinstance(path, Storage) else LocalStorage(path)
    table = HudiTable.open(store)
    instants = set(table.completed_instants())
    for _, name, _ in archives_in(store):
        archive = f".hoodie/archived/{name}"
        for entry in read_archive(archive, store.read(archive)):
            if entry.action in WRITE_ACTIONS and entry.state == "COMPLETED":
                instants.add(entry.instant)
    total: dict[str, int] = {}
    for instant in instants:
        counts = json.loads(table.commit_metadata(instant)["extraMetadata"]["cdcctl.counts"])
        for name, value in counts.items():
            total[name] = total.get(name, 0) + value
    return total


def with_replayed_windows(msgs: list, fraction: float, seed: int) -> tuple[list, int]:
    """Re-send windows of earlier messages (as a restarted connector does).

    Returns the new stream and the number of stale change events it contains (replayed
    tombstones repeat their delete and are not counted).
    """
    rng = random.Random(seed)
    out = list(msgs)
    budget, stale = int(len(msgs) * fraction), 0
    while budget > 0:
        i = rng.randrange(len(out) - 50)
        while out[i][2] is None:
            i += 1  # windows start at an event, as a connector resumes at a position
        j = i + rng.randint(5, 40)
        if out[j - 1][2] is not None and b'"op":"d"' in out[j - 1][2]:
            j += 1  # a delete and its tombstone travel together
        window = out[i:j]
        at = rng.randrange(j, min(len(out), j + 2000) + 1)
        out[at:at] = window
        stale += sum(1 for _, _, v in window if v is not None)
        budget -= len(window)
    return out, stale
