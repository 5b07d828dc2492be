"""`cdcctl init` never writes a secret: not from the environment it runs in, and not
from a URL flag that holds one (such a URL is refused, naming the flag, not the value)."""

from __future__ import annotations

import tomllib
import uuid
from pathlib import Path

import pytest

from engine.config import load_config
from tests.integration.replicas import run_cli

FLAGS = ("--bootstrap-servers", "127.0.0.1:9092", "--topics", r"^pg\.", "--target", "./lake")
#: Every variable a password could be taken from: the database clients' own, and the
#: names the generated config's comments suggest.
PASSWORD_VARIABLES = (
    "PGPASSWORD",
    "MYSQL_PWD",
    "SCHEMA_REGISTRY_PASSWORD",
    "CDCCTL_KAFKA_PASSWORD",
    "CDCCTL_REGISTRY_PASSWORD",
)


def _files_holding(secret: str, folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_init_with_every_credential_option_writes_no_secret(
    tmp_path: Path, scratch_postgres
) -> None:
    """The source database (its catalog is read with PGPASSWORD) and an Avro registry,
    with a planted password in every variable it could come from."""
    secret = f"planted-{uuid.uuid4().hex}"
    out = tmp_path / "cdcctl.toml"
    run = run_cli(
        "init", *FLAGS,
        "--format", "debezium-avro",
        "--schema-registry-url", "https://registry.example:8081",
        "--source", scratch_postgres.dsn,
        "--output", str(out),
        env=dict.fromkeys(PASSWORD_VARIABLES, secret),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "read the column types of" in run.stderr
    assert secret not in run.stdout + run.stderr
    assert _files_holding(secret, tmp_path) == []
    source = tomllib.loads(out.read_text())["source"]
    assert source["database_dsn"] == scratch_postgres.dsn
    assert source["schema_registry"] == {"url": "https://registry.example:8081"}
    # Nothing that holds or names a password is written as a key, only as a comment.
    assert not [k for k in source if "password" in k]
    assert load_config(out).source.schema_registry is not None


@pytest.mark.parametrize(
    ("flag", "url", "instead"),
    [
        ("--source", "postgresql://postgres:{}@127.0.0.1:5432/postgres", "PGPASSWORD"),
        ("--source", "mysql://root:{}@127.0.0.1:3306", "MYSQL_PWD"),
        ("--schema-registry-url", "https://key:{}@registry.example:8081", "basic_auth_password"),
    ],
)
def test_init_refuses_a_password_in_a_url(
    tmp_path: Path, flag: str, url: str, instead: str
) -> None:
    secret = f"planted-{uuid.uuid4().hex}"
    out = tmp_path / "cdcctl.toml"
    extra = ["--format", "debezium-avro"] if flag == "--schema-registry-url" else []
    run = run_cli("init", *FLAGS, *extra, flag, url.format(secret), "--output", str(out))
    assert run.returncode == 2, run.stderr
    assert f"error: {flag} holds a password" in run.stderr, run.stderr
    assert instead in run.stderr and '"${env:NAME}"' in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    assert secret not in run.stdout + run.stderr
    assert not out.exists() and _files_holding(secret, tmp_path) == []
