"""``cdcctl init``: write a validated, commented config file."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

import engine
from cdcctl.console import err

#: The flags every config needs, with the prompt asked on a terminal and its suggestion.
_REQUIRED = {
    "bootstrap_servers": ("Kafka bootstrap servers (host:port[,host:port])", "127.0.0.1:9092"),
    "topics": ("Topic pattern (regular expression)", None),
    "target": ("Folder for the Hudi tables", "./lake"),
}


def init(
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(metavar="HOST:PORT", help="Kafka bootstrap servers, host:port[,host:port]"),
    ] = None,
    topics: Annotated[
        str | None, typer.Option(metavar="REGEX", help="regular expression over topic names")
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            metavar="DIR", help="folder that holds the Hudi tables (relative: to the config file)"
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help=f"message format (default {engine.config_default('source.format')}): "
            f"{', '.join(engine.SUPPORTED_FORMATS)}",
        ),
    ] = None,
    schema_registry_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="schema registry of --format debezium-avro, e.g. http://registry:8081",
        ),
    ] = None,
    num_buckets: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="bucket index size per table "
            f"[default: {engine.config_default('hudi.num_buckets')}]",
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source",
            metavar="DSN",
            help="the source database (postgresql://user@host:5432/db or "
            "mysql://user@host:3306): schemaless JSON columns get its catalog's types",
        ),
    ] = None,
    output: Annotated[Path, typer.Option(metavar="FILE", help="config file to write")] = Path(
        "cdcctl.toml"
    ),
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """Write a replicator config file.

    On a terminal, missing values are asked for; without one, every missing flag is an
    error (exit 2), named in one message.
    """
    values = {"bootstrap_servers": bootstrap_servers, "topics": topics, "target": target}
    if sys.stdin.isatty():
        for name, (prompt, default) in _REQUIRED.items():
            if not values[name]:
                values[name] = typer.prompt(prompt, default=default)
    missing = [f"--{name.replace('_', '-')}" for name, value in values.items() if not value]
    if missing:
        raise engine.ConfigError(
            f"missing {', '.join(missing)}",
            hint="pass them as flags, e.g. cdcctl init --bootstrap-servers kafka:9092 "
            "--topics '^dbserver1\\.inventory\\.' --target ./lake",
        )
    if fmt == "debezium-avro" and not schema_registry_url:
        raise engine.ConfigError(
            "--format debezium-avro needs --schema-registry-url",
            hint="e.g. cdcctl init --format debezium-avro --schema-registry-url "
            "http://registry:8081 ...",
        )
    _refuse_password(
        "--source",
        source,
        "remove it from the URL and export PGPASSWORD (MySQL: MYSQL_PWD), which init and "
        'start read, or add database_password = "${env:NAME}" under [source] after init',
    )
    _refuse_password(
        "--schema-registry-url",
        schema_registry_url,
        "remove user:password from the URL; after init, set basic_auth_user and "
        'basic_auth_password = "${env:NAME}" under [source.schema_registry]',
    )
    if output.exists() and not force:
        raise engine.ConfigError(f"{output} already exists", hint="use --force to overwrite it")
    text = engine.render_config(
        bootstrap_servers=str(values["bootstrap_servers"]),
        topics=str(values["topics"]),
        target=str(values["target"]),
        fmt=fmt,
        schema_registry_url=schema_registry_url,
        num_buckets=num_buckets,
        base_dir=output.resolve().parent,
        database_dsn=source,
    )
    if source:
        # Read the catalog once now: a wrong URL or password shows here, not at start.
        data = tomllib.loads(text)
        data["base_dir"] = str(output.resolve().parent)
        tables = engine.check_catalog(engine.config_from_dict(data))
        err.print(f"read the column types of {tables} table(s) from the source", markup=False)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    err.print(f"wrote {output}; next: cdcctl start --config {output}", markup=False)


def _refuse_password(flag: str, url: str | None, hint: str) -> None:
    """A URL given to init must not hold a password: the config never holds one (the
    error names the flag, never the value)."""
    if url and urlsplit(url).password is not None:
        raise engine.ConfigError(
            f"{flag} holds a password; cdcctl never writes a password to its config", hint=hint
        )
