"""Reading a config: layering, validation, and every problem reported in one error.

Layering, lowest first: defaults in the models < the TOML file < ``CDCCTL_*``
environment variables (``CDCCTL_BOOTSTRAP_SERVERS``, ``CDCCTL_TOPICS``,
``CDCCTL_TARGET``) < command-line flags (applied by the caller through
:func:`load_config` overrides). A config is valid when the models accept it, its folders
can be written and every secret reference names a value; all three kinds of problem are
listed together (:func:`config_from_dict`).
"""

from __future__ import annotations

import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.config.base import FLAT_SECTION, file_keys
from engine.config.model import Config
from engine.config.references import absolute_secret_files, secret_problems
from engine.errors import ConfigError
from engine.naming import close_match
from engine.storage import is_object_url

_FIXES = {
    "missing": "add this key",
}

#: Keys that were replaced: the problem and its fix, instead of "not a known setting".
_REPLACED = {
    "replicator.max_bad_fraction": (
        "replaced by errors.tolerance",
        'remove it and set [errors] tolerance = "none" (a bad message stops its table) or '
        '"all" (bad messages go to the dead-letter file, the rest applies)',
    ),
}

_ENV_OVERRIDES = {
    "CDCCTL_BOOTSTRAP_SERVERS": ("source", "bootstrap_servers"),
    "CDCCTL_TOPICS": ("source", "topics"),
    "CDCCTL_TARGET": ("target", "path"),
}

#: A location's part naming a section the file writes flat (``source.<kafka>.topics`` is
#: the file's ``source.topics``).
_FLAT_PART = re.compile("^" + re.escape(FLAT_SECTION).replace(r"\{\}", r"\w+") + "$")


def _problems(exc: ValidationError) -> list[tuple[str, str, str]]:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"] if not _FLAT_PART.match(str(p)))
        if err["type"] == "extra_forbidden" and key in _REPLACED:
            problems.append((key, *_REPLACED[key]))
            continue
        msg = err["msg"].removeprefix("Value error, ")
        fix = _FIXES.get(err["type"], "")
        if err["type"] == "extra_forbidden":
            msg = "not a known setting"
            fix = _did_you_mean(key) or "remove this key"
        problems.append((key, msg, fix))
    return problems


def _did_you_mean(key: str) -> str:
    """``did you mean `source.bootstrap_servers`?`` for a key one typo away from a
    known one at the same level (empty when none is close)."""
    parts = key.split(".")
    if len(parts) > 2 and parts[0] == "tables":
        parts[1] = "<name>"
    parent, leaf = ".".join(parts[:-1]), parts[-1]
    siblings = {
        k.rsplit(".", 1)[-1]: k
        for k in file_keys(Config)
        if (k.rsplit(".", 1)[0] if "." in k else "") == parent
    }
    close = close_match(leaf, list(siblings))
    if not close:
        return ""
    shown = key.rsplit(".", 1)[0] + "." + close if "." in key else close
    return f"did you mean `{shown}`?"


def folder_problem(path: Path) -> tuple[str, str] | None:
    """Why ``path`` cannot be (or become) a folder the replicator writes to, with the fix.

    An existing folder must accept a new file (tried: permission bits say nothing for
    root, a read-only mount says it only on write); a missing one is created later, so
    its nearest existing ancestor must be a folder that accepts one.
    """
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder", "point it at a folder (created if missing)"
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return (
            f"{path} cannot be created: {probe} is a file",
            "point it at a folder (created if missing)",
        )
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        where = "" if probe == path else f" ({probe}, where it would be created)"
        return (
            f"{path} is not writable{where}: {exc.strerror or exc}",
            "choose a folder this user can write, or fix its permissions",
        )
    return None


def _path_problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Problems with the folders the config names (target, work folder)."""
    base = Path(str(data.get("base_dir") or "."))
    folders = {
        "target.path": (data.get("target") or {}).get("path"),
        "replicator.work_dir": (data.get("replicator") or {}).get("work_dir", ".cdcctl"),
    }
    problems = []
    for key, value in folders.items():
        if key == "replicator.work_dir" and isinstance(value, str) and "://" in value:
            problems.append(
                (key, f"{value!r} is a URL: the work folder is local", "set a local folder")
            )
            continue
        if isinstance(value, str) and value and not is_object_url(value):
            problem = folder_problem((base / value).resolve())
            if problem is not None:
                problems.append((key, *problem))
    return problems


def config_from_dict(data: dict[str, Any], *, source_name: str = "<config>") -> Config:
    """Validate a config mapping, reporting every problem at once.

    Besides the values themselves, the target and work folders must be folders this
    user can write (or create), and every secret reference must name a value (an unset
    variable, an unreadable file): all are listed in one error before anything runs.
    """
    problems = []
    config = None
    data = absolute_secret_files(data)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc)
    problems += _path_problems(data)
    problems += secret_problems(data)
    if problems or config is None:
        raise ConfigError(f"{source_name} is not a valid cdcctl config", problems=problems)
    return config


def load_config(path: str | Path, overrides: dict[str, dict[str, Any]] | None = None) -> Config:
    """Read, layer and validate a config file.

    Args:
        path: the TOML file.
        overrides: section -> key -> value, applied last (command-line flags).

    Raises:
        ConfigError: the file is missing, not TOML, or invalid (every problem listed).
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(
            f"config file {file} does not exist",
            hint="create one with `cdcctl init --output " + str(file) + "`",
        )
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}", hint="fix the syntax") from None
    for env, (section, key) in _ENV_OVERRIDES.items():
        if env in os.environ:
            data.setdefault(section, {})[key] = os.environ[env]
    for section, values in (overrides or {}).items():
        data.setdefault(section, {}).update(values)
    data["base_dir"] = str(file.resolve().parent)
    return config_from_dict(data, source_name=str(file))
