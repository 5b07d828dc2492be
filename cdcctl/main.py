"""The cdcctl command line: a thin Typer layer over ``engine``.

stdout carries data (tables, JSON); diagnostics and errors go to stderr. Every engine
error is rendered in one place (:func:`main`) without a traceback and mapped to a named
exit code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from cdcctl import exit_codes
from engine.config import SUPPORTED_FORMATS, load_config, render_config
from engine.errors import CdcError, ConfigError

app = typer.Typer(
    name="cdcctl",
    help="Replicate Debezium change topics into Apache Hudi tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output is not squeezed to 80 columns (tables would be truncated).
out = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)

ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", help="replicator config file (TOML)")
]


def _ask(value: str | None, prompt: str, default: str | None = None) -> str | None:
    if value is not None:
        return value
    if sys.stdin.isatty():
        return typer.prompt(prompt, default=default)
    return default


@app.command()
def init(
    bootstrap_servers: Annotated[
        str | None, typer.Option(help="Kafka bootstrap servers, host:port[,host:port]")
    ] = None,
    topics: Annotated[str | None, typer.Option(help="regular expression over topic names")] = None,
    target: Annotated[str | None, typer.Option(help="folder that holds the Hudi tables")] = None,
    fmt: Annotated[
        str, typer.Option("--format", help=f"message format: {', '.join(SUPPORTED_FORMATS)}")
    ] = "debezium-json",
    num_buckets: Annotated[int, typer.Option(help="bucket index size per table")] = 8,
    output: Annotated[Path, typer.Option(help="config file to write")] = Path("cdcctl.toml"),
    force: Annotated[bool, typer.Option(help="overwrite an existing file")] = False,
) -> None:
    """Write a replicator config file (asks for missing values on a terminal)."""
    bootstrap_servers = _ask(bootstrap_servers, "Kafka bootstrap servers", "127.0.0.1:9092")
    topics = _ask(topics, "Topic pattern (regular expression)")
    target = _ask(target, "Target folder for the Hudi tables", "./lake")
    missing = [
        f"--{name.replace('_', '-')}"
        for name, value in (("bootstrap_servers", bootstrap_servers), ("topics", topics))
        if not value
    ]
    if missing:
        raise ConfigError(f"missing {', '.join(missing)}", hint="pass them as flags")
    if output.exists() and not force:
        raise ConfigError(f"{output} already exists", hint="use --force to overwrite it")
    assert bootstrap_servers and topics and target
    text = render_config(
        bootstrap_servers=bootstrap_servers,
        topics=topics,
        target=target,
        fmt=fmt,
        num_buckets=num_buckets,
    )
    output.write_text(text)
    err.print(f"wrote {output}; next: cdcctl start --config {output}")


@app.command()
def start(
    config: ConfigOpt = Path("cdcctl.toml"),
    until_caught_up: Annotated[
        bool,
        typer.Option(help="exit 0 once every topic is applied up to its end offset at start"),
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="print the final per-table summary as JSON")
    ] = False,
) -> None:
    """Run the replicator (Ctrl-C stops it cleanly after the batch in flight)."""
    cfg = load_config(config)
    from engine.spark import start_for

    start_for(cfg)  # the JVM boots while the engine is imported and the first batch is read
    from engine.replicator import BatchReport, Replicator

    live = sys.stderr.isatty()

    def on_batch(report: BatchReport) -> None:
        tables = ", ".join(
            f"{name} +{c['inserts']}/~{c['updates']}/-{c['deletes']}"
            for name, c in sorted(report.tables.items())
        )
        err.print(
            f"batch {report.number}: {report.messages} msgs in {report.seconds:.2f}s "
            f"({report.messages / max(report.seconds, 1e-9):,.0f}/s), lag {report.lag_messages} "
            f"| {tables} | "
            + " ".join(f"{k} {v:.2f}s" for k, v in report.phases.items()),
            highlight=False,
        )

    replicator = Replicator(cfg, on_batch=on_batch, log=lambda m: err.print(m, highlight=False))
    if live:
        err.print(f"replicating {cfg.source.topics} -> {cfg.target_path()} (Ctrl-C to stop)")
    replicator.run(until_caught_up=until_caught_up)
    if json_out:
        import json

        print(json.dumps(replicator.status(), indent=2))
    else:
        _print_status(replicator.status())
    failing = replicator.failing()
    for rt in failing:
        err.print(f"[red]FAILING[/red] {rt.name}: {rt.error}", highlight=False)
    _exit_now(exit_codes.RUNTIME if failing else 0)


def _exit_now(code: int) -> NoReturn:
    """End the process without tearing the interpreter down.

    Everything is committed, closed and printed by now; unloading Spark's gateway,
    pyarrow and polars would only cost ~0.5 s more. The Spark JVM and its Python workers
    exit by themselves when this process's pipes close.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _print_status(rows: list[dict]) -> None:
    counters = ("inserts", "updates", "deletes", "truncates", "late", "bad", "commits")
    table = Table("table", "state", *counters)
    for r in rows:
        table.add_row(r["table"], r["state"], *(str(r[k]) for k in counters))
    out.print(table)


@app.command()
def demo(
    events: Annotated[int, typer.Option(help="number of Debezium messages to generate")] = 50_000,
    target: Annotated[
        Path | None, typer.Option(help="where to write the replicas (default: a temp folder)")
    ] = None,
) -> None:
    """Run an embedded broker, write an inventory workload, replicate it and query it."""
    from engine.demo import run_demo

    err.print(f"demo: embedded broker, {events:,} Debezium events (customers, products, orders)")
    report = run_demo(
        events=events,
        target=target,
        on_batch=lambda r: err.print(
            f"  batch {r.number}: {r.messages:,} msgs in {r.seconds:.2f}s, lag {r.lag_messages:,}",
            highlight=False,
        ),
        log=lambda m: err.print("  " + m, highlight=False),
    )
    counts = Table("table", "rows", title=f"Replicas in {report.target}")
    for name, n in report.row_counts.items():
        counts.add_row(name, f"{n:,}")
    out.print(counts)
    out.print(f"replicated {report.events:,} events in {report.seconds:.1f}s")
    sample = Table(*report.sample.column_names, title=report.sample_sql)
    for row in report.sample.to_pylist():
        sample.add_row(*(str(v) for v in row.values()))
    out.print(sample)


def main() -> None:
    """Entry point: run the app, rendering engine errors without tracebacks."""
    try:
        app()
    except CdcError as exc:
        err.print(f"[red]error:[/red] {exc.message}", highlight=False)
        if isinstance(exc, ConfigError):
            for key, msg, fix in exc.problems:
                err.print(f"  - {key}: {msg}" + (f" (fix: {fix})" if fix else ""), highlight=False)
        if exc.hint:
            err.print(f"  hint: {exc.hint}", highlight=False)
        sys.exit(exit_codes.USAGE if isinstance(exc, ConfigError) else exit_codes.RUNTIME)
    except Exception as exc:  # a bug: say so in one line unless asked for the traceback
        if os.environ.get("CDCCTL_DEBUG"):
            raise
        err.print(f"[red]internal error:[/red] {type(exc).__name__}: {exc}", highlight=False)
        err.print("  hint: rerun with CDCCTL_DEBUG=1 for the traceback and report it", highlight=False)
        sys.exit(exit_codes.RUNTIME)


if __name__ == "__main__":
    main()
