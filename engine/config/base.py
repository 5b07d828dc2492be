"""What every config section shares, and the marks the generated files read.

Each setting's meaning is its field's ``description`` (Markdown, links relative to
``docs/guide/``) and its default is the field's default: the configuration reference
(:mod:`engine.config.reference`) and ``cdcctl init``'s file (:mod:`engine.config.render`)
are generated from them. ``json_schema_extra`` marks say the rest:

* ``init``: the comment ``cdcctl init`` writes beside the key (the key is written);
* ``init_given``: written by ``cdcctl init`` only when it is given a value;
* ``shown_default``: the reference's text for a default its value says badly;
* ``internal``: not a setting of the file (left out of the reference).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, get_args
from urllib.parse import SplitResult, urlsplit

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo


class Section(BaseModel):
    """A section of the file: unknown keys are refused, values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def init(comment: str = "", *, given: bool = False) -> dict[str, Any]:
    """The mark of a key ``cdcctl init`` writes, with its comment (``given``: only
    when init has a value for it)."""
    return {"init_given" if given else "init": comment}


#: The alias of a section whose keys sit directly under its parent's table in the file
#: (``source.kafka``: ``[source] bootstrap_servers``): the section's own name is then no
#: key of the file (``kafka = ...`` is refused as unknown).
FLAT_SECTION = "<{}>"


def flat_sections(model: type[BaseModel]) -> dict[str, type[Section]]:
    """The sections of ``model`` whose keys the file writes flat, by alias."""
    found = {}
    for name, field in model.model_fields.items():
        section = field.annotation
        if field.alias == FLAT_SECTION.format(name):
            assert isinstance(section, type) and issubclass(section, Section)
            found[field.alias] = section
    return found


def file_fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    """The keys of ``model``'s table in the file, in order, with their fields (the
    flat sections' keys in their place)."""
    flat = flat_sections(model)
    for name, field in model.model_fields.items():
        if field.alias in flat:
            yield from file_fields(flat[field.alias])
        else:
            yield name, field


def file_keys(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every key the file may hold under ``model``, dotted (``source.topics``; a table's
    own keys as ``tables.<name>.key``)."""
    for key, field in file_fields(model):
        section = section_of(field)
        if section is None:
            yield f"{prefix}{key}"
            continue
        yield f"{prefix}{key}"  # the table itself ([hudi], [source.schema_registry])
        nested = "tables.<name>." if key == "tables" else f"{prefix}{key}."
        yield from file_keys(section, nested)


def section_of(field: FieldInfo) -> type[Section] | None:
    """The section a field holds (also optional, or by name in a mapping), if any."""
    candidates = [field.annotation, *get_args(field.annotation)]
    for candidate in candidates:
        for kind in (candidate, *get_args(candidate)):
            if isinstance(kind, type) and issubclass(kind, Section):
                return kind
    return None


def marks(field: FieldInfo) -> dict[str, Any]:
    """A field's marks (its ``json_schema_extra``)."""
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


#: The mark of a field that is no setting of the file.
INTERNAL: dict[str, Any] = {"internal": True}


def http_url(value: str) -> SplitResult:
    """The parts of an ``http://`` or ``https://`` URL with a host (a field validator's
    ValueError otherwise); each caller then says which credentials it refuses in it."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return parts
