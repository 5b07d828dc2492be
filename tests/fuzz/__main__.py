"""The long fuzz run: ``python -m tests.fuzz --minutes 10``.

Coverage-guided with atheris (libFuzzer) by default: each input picks a fuzz target of
tests/fuzz/registry.py, a topic and a batch of seed messages, and mutates them with the
choices the fuzzer's bytes dictate (tests/fuzz/mutations.py), so coverage of the decoder's
Python code steers the mutations. ``--engine random`` runs the same mutators from a seeded
``random.Random`` instead (no atheris needed).

Every input goes through the guarded decoder the replicator builds and the contract check
of tests/fuzz/harness.py. A failure (exception, broken contract, hang) is recorded and the
run goes on: the input is written to ``--crash-dir`` as a replayable JSON file (topic and
base64 records), one per distinct failure. A crash of the process itself (a segmentation
fault in native code) is caught by libFuzzer, which writes its ``crash-*`` file there too.
At the end the figures are printed and written to ``<crash-dir>/stats.json``.

Replay a saved input: ``python -m tests.fuzz --replay FILE``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

STATS: dict[str, Any] = {"inputs": 0, "records": 0, "failures": 0, "distinct": {}}


def _signature(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = tb[-1] if tb else None
    place = f"{Path(where.filename).name}:{where.lineno}" if where else "?"
    return f"{type(exc).__name__} at {place}: {str(exc)[:120]}"


def _save(crash_dir: Path, fmt: str, topic: str, records: list, exc: BaseException) -> None:
    sig = _signature(exc)
    STATS["failures"] += 1
    if sig in STATS["distinct"]:
        STATS["distinct"][sig]["count"] += 1
        return
    doc = {
        "format": fmt,
        "topic": topic,
        "error": sig,
        "records": [
            [None if k is None else base64.b64encode(k).decode(),
             None if v is None else base64.b64encode(v).decode()]
            for k, v in records
        ],
    }  # fmt: skip
    name = hashlib.sha256(sig.encode()).hexdigest()[:12]
    path = crash_dir / f"failure-{name}.json"
    path.write_text(json.dumps(doc, indent=1))
    STATS["distinct"][sig] = {"count": 1, "file": str(path)}
    print(f"\nFAILURE {sig}\n  input saved to {path}", file=sys.stderr, flush=True)


def _write_stats(crash_dir: Path, started: float) -> None:
    STATS["seconds"] = round(time.monotonic() - started, 1)
    (crash_dir / "stats.json").write_text(json.dumps(STATS, indent=1))


def _one(chooser: Any, crash_dir: Path, formats: list[str]) -> None:
    from tests.fuzz.control import CONTROL_TARGET, control_checked, mutated_values
    from tests.fuzz.harness import Hang, decode_checked
    from tests.fuzz.mutations import choice, mutated_batch
    from tests.fuzz.registry import seeds

    fmt = choice(chooser, formats)
    if fmt == CONTROL_TARGET:
        topic = "control"
        records: list = [(None, v) for v in mutated_values(chooser, max_records=12)]
    else:
        topic, records = mutated_batch(seeds(fmt), chooser, max_records=12, rounds=3)
    STATS["inputs"] += 1
    STATS["records"] += len(records)
    try:
        if fmt == CONTROL_TARGET:
            control_checked([v for _, v in records])
        else:
            decode_checked(fmt, topic, records)
    except (Exception, Hang) as exc:  # every failure is a finding, recorded
        _save(crash_dir, fmt, topic, records, exc)


class _FdpChooser:
    """Choices consumed from atheris' FuzzedDataProvider (then zeros when exhausted)."""

    def __init__(self, fdp: Any) -> None:
        self.fdp = fdp

    def integer(self, lo: int, hi: int) -> int:
        return int(self.fdp.ConsumeIntInRange(lo, hi))

    def raw(self, max_size: int) -> bytes:
        return bytes(self.fdp.ConsumeBytes(self.fdp.ConsumeIntInRange(0, max_size)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to run")
    parser.add_argument("--engine", choices=["atheris", "random"], default="atheris")
    parser.add_argument(
        "--format",
        action="append",
        help="fuzz only this format (repeatable): a source.format, or control-records "
        "(schema change, transaction and heartbeat records the replicator reads itself)",
    )
    parser.add_argument("--crash-dir", type=Path, default=Path("fuzz-findings"))
    parser.add_argument("--seed", type=int, default=0, help="--engine random: the RNG seed")
    parser.add_argument("--rss-limit-mb", type=int, default=4096)
    parser.add_argument("--replay", type=Path, help="decode one saved input and check it")
    args = parser.parse_args(argv)

    if args.replay:
        from tests.fuzz.control import CONTROL_TARGET, control_checked
        from tests.fuzz.harness import decode_checked

        doc = json.loads(args.replay.read_text())
        records = [
            (None if k is None else base64.b64decode(k), None if v is None else base64.b64decode(v))
            for k, v in doc["records"]
        ]
        if doc["format"] == CONTROL_TARGET:
            control_checked([v for _, v in records])
        else:
            decode_checked(doc["format"], doc["topic"], records)
        print("no failure: the input decodes within the contract")
        return 0

    # Nothing that imports engine before atheris instruments it (below): a module
    # imported before that gives no coverage feedback.
    from tests.fuzz.registry import CONTROL_TARGET, FUZZ_TARGETS

    formats = args.format or [*sorted(FUZZ_TARGETS), CONTROL_TARGET]
    unknown = sorted(set(formats) - {*FUZZ_TARGETS, CONTROL_TARGET})
    if unknown:
        parser.error(
            f"unknown --format {unknown}: one of {[*sorted(FUZZ_TARGETS), CONTROL_TARGET]}"
        )
    args.crash_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + args.minutes * 60
    STATS["engine"] = args.engine
    STATS["formats"] = formats

    if args.engine == "random":
        from tests.fuzz.mutations import RandomChooser

        rng = random.Random(args.seed)
        while time.monotonic() < deadline:
            _one(RandomChooser(rng), args.crash_dir, formats)
            if STATS["inputs"] % 500 == 0:
                _write_stats(args.crash_dir, started)
                print(f"{STATS['inputs']} inputs, {STATS['failures']} failures", flush=True)
        _write_stats(args.crash_dir, started)
        print(json.dumps(STATS, indent=1))
        return 1 if STATS["failures"] else 0

    try:
        import atheris
    except ImportError:
        print(
            "atheris is not installed: `.venv/bin/pip install -e '.[fuzz]'` (Linux/macOS, "
            "CPython 3.11+), or run the same mutators without coverage guidance with "
            "--engine random",
            file=sys.stderr,
        )
        return 2

    # Every module a fuzz target runs, imported under instrumentation (coverage feedback).
    already = sorted(m for m in sys.modules if m == "engine" or m.startswith("engine."))
    if already:
        raise SystemExit(f"engine modules imported before instrumentation: {already[:5]}")
    with atheris.instrument_imports(include=["engine"]):
        import engine.decode  # noqa: F401
        import engine.decode.cdc_json  # noqa: F401
        import engine.decode.control  # noqa: F401
        import engine.decode.ddl  # noqa: F401
        import engine.decode.debezium_avro  # noqa: F401
        import engine.decode.debezium_json  # noqa: F401
        import engine.decode.rewrite  # noqa: F401
        import engine.source.transactions  # noqa: F401

    def test_one_input(data: bytes) -> None:
        _one(_FdpChooser(atheris.FuzzedDataProvider(data)), args.crash_dir, formats)
        if STATS["inputs"] % 50 == 0:
            _write_stats(args.crash_dir, started)

    seconds = max(1, int(args.minutes * 60))
    libfuzzer = [
        sys.argv[0],
        f"-max_total_time={seconds}",
        f"-rss_limit_mb={args.rss_limit_mb}",
        "-timeout=60",
        "-max_len=4096",
        "-len_control=0",
        f"-artifact_prefix={args.crash_dir}{os.sep}",
        "-print_final_stats=1",
    ]
    import atexit

    def done() -> None:
        _write_stats(args.crash_dir, started)
        print(json.dumps(STATS, indent=1), flush=True)

    atexit.register(done)
    corpus = args.crash_dir / "corpus"
    corpus.mkdir(exist_ok=True)
    atheris.Setup([*libfuzzer, str(corpus)], test_one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
