"""Secret references: ``${env:NAME}`` and ``${file:PATH}``, never a password in the file.

The Kafka SASL password, the TLS key password, the source database password and the
schema registry's basic-auth password are references (or, older form, the
``sasl_password_env`` / ``sasl_password_file`` / ``ssl_key_password_env`` /
``database_password_env`` keys). Every reference is resolved when the config is loaded
(:func:`secret_problems`: an unset variable or unreadable file is a config problem
listed with the others); each value is registered with :mod:`engine.redaction`, so it
is never logged, stored or printed, and handed out as a ``SecretStr``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from engine.errors import ConfigError
from engine.redaction import register as register_secret

#: A secret reference: ``${env:NAME}`` or ``${file:PATH}``.
SECRET_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
#: The ``[source]`` keys that take a secret reference, with the older key(s) they replace.
SECRET_KEYS = {
    "sasl_password": ("sasl_password_env", "sasl_password_file"),
    "ssl_key_password": ("ssl_key_password_env",),
    "database_password": ("database_password_env",),
}
#: The ``[source.schema_registry]`` key that takes one.
REGISTRY_SECRET = "basic_auth_password"
#: The ``[target.s3]`` keys that take one.
TARGET_SECRETS = ("access_key_id", "secret_access_key", "session_token")
#: How the configuration reference describes a key that takes a reference.
REFERENCE_DOC = 'as a reference only: `"${env:NAME}"` or `"${file:PATH}"`'


def reference_only(value: str | None) -> str | None:
    """A secret key's value must be a reference (the field validator of each such key)."""
    if value is not None and not SECRET_REFERENCE.fullmatch(value):
        raise ValueError(
            "a password must not be in the file: write a reference, "
            '"${env:NAME}" (an environment variable) or "${file:PATH}" (a file holding it)'
        )
    return value


class Unresolved(Exception):
    """A reference that names no value: why, and the fix."""

    def __init__(self, reason: str, fix: str) -> None:
        super().__init__(reason)
        self.reason, self.fix = reason, fix


def _read(key: str, reference: str) -> str:
    match = SECRET_REFERENCE.fullmatch(reference)
    if match is None:  # pragma: no cover - the model refuses anything else
        raise Unresolved("not a secret reference", 'use "${env:NAME}"')
    kind, name = match.groups()
    if kind == "env":
        value = os.environ.get(name)
        if value is None:
            raise Unresolved(
                f"environment variable {name} is not set",
                f"export {name}=... before running cdcctl, or change {key}",
            )
        return value
    path = Path(name).expanduser()
    try:
        return path.read_text().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise Unresolved(
            f"cannot read {path}: {reason}",
            f"create the file (readable by this user only: chmod 600) or change {key}",
        ) from None


def resolve_reference(key: str, reference: str) -> str:
    """The value ``${env:NAME}`` or ``${file:PATH}`` points at (a file's text without
    its trailing newline).

    Raises:
        ConfigError: naming the key and the reference, never a value.
    """
    try:
        return _read(key, reference)
    except Unresolved as exc:
        raise ConfigError(f"{key} = {reference}: {exc.reason}", hint=exc.fix) from None


def secret_value(key: str, reference: str | None) -> SecretStr | None:
    """The secret behind ``reference`` (None: not configured), registered for redaction."""
    if reference is None:
        return None
    value = resolve_reference(key, reference)
    register_secret(value)
    return SecretStr(value)


def section_secret(section: Any, key: str) -> SecretStr | None:
    """The secret ``key`` of a ``[source]`` section from its reference or its older
    ``*_env`` / ``*_file`` key; None when neither is set. Registered for redaction.

    Raises:
        ConfigError: the variable is not set or the file cannot be read.
    """
    reference, named = getattr(section, key), key
    for older in SECRET_KEYS[key]:
        if reference is None and getattr(section, older, None):
            kind = older.rsplit("_", 1)[1]
            reference, named = "${" + kind + ":" + getattr(section, older) + "}", older
    return secret_value(f"source.{named}", reference)


def _references(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The secret references a raw config mapping holds, by key."""
    source = data.get("source")
    found = (
        [(f"source.{key}", source.get(key)) for key in SECRET_KEYS]
        if isinstance(source, dict)
        else []
    )
    registry = source.get("schema_registry") if isinstance(source, dict) else None
    if isinstance(registry, dict):
        found.append((f"source.schema_registry.{REGISTRY_SECRET}", registry.get(REGISTRY_SECRET)))
    s3 = _target_s3(data)
    found.extend((f"target.s3.{key}", s3.get(key)) for key in TARGET_SECRETS)
    lineage = data.get("lineage")
    if isinstance(lineage, dict):
        found.append(("lineage.api_key", lineage.get("api_key")))
    return [(k, v) for k, v in found if isinstance(v, str) and SECRET_REFERENCE.fullmatch(v)]


def _target_s3(data: dict[str, Any]) -> dict[str, Any]:
    """The raw ``[target.s3]`` mapping ({} when absent or malformed)."""
    target = data.get("target")
    s3 = target.get("s3") if isinstance(target, dict) else None
    return s3 if isinstance(s3, dict) else {}


def secret_problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Resolve every secret reference of a raw config mapping now (registering each
    value for redaction): the ones naming no value, as problems of the config."""
    problems = []
    for key, reference in _references(data):
        try:
            register_secret(_read(key, reference))
        except Unresolved as exc:
            problems.append((f"{key} = {reference}", exc.reason, exc.fix))
    return problems


def absolute_secret_files(data: dict[str, Any]) -> dict[str, Any]:
    """``${file:PATH}`` references (and the registry's CA file) with a relative path
    made relative to the config file's folder, like every path in the file."""
    base = Path(str(data.get("base_dir") or "."))
    s3 = _target_s3(data)
    if s3:
        s3 = dict(s3)
        for key in TARGET_SECRETS:
            _absolute_file(s3, key, base)
        data = {**data, "target": {**data["target"], "s3": s3}}
    lineage = data.get("lineage")
    if isinstance(lineage, dict):
        lineage = dict(lineage)
        _absolute_file(lineage, "api_key", base)
        data = {**data, "lineage": lineage}
    source = data.get("source")
    if not isinstance(source, dict):
        return data

    changed = dict(source)
    for key in SECRET_KEYS:
        _absolute_file(changed, key, base)
    registry = source.get("schema_registry")
    if isinstance(registry, dict):
        registry = dict(registry)
        _absolute_file(registry, REGISTRY_SECRET, base)
        ca = registry.get("ssl_ca_location")
        if isinstance(ca, str) and ca and not Path(ca).expanduser().is_absolute():
            registry["ssl_ca_location"] = str(base / Path(ca).expanduser())
        changed["schema_registry"] = registry
    return {**data, "source": changed}


def _absolute_file(values: dict[str, Any], key: str, base: Path) -> None:
    """A ``${file:PATH}`` reference of ``values[key]`` with PATH made relative to ``base``."""
    match = SECRET_REFERENCE.fullmatch(str(values.get(key, "")))
    if match and match.group(1) == "file":
        path = Path(match.group(2)).expanduser()
        if not path.is_absolute():
            values[key] = "${file:" + str(base / path) + "}"
