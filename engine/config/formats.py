"""The sections of the message formats that need settings: ``[source.cdc_json]`` and
``[source.flattened]``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from engine.config.base import Section

SUPPORTED_FORMATS = ("debezium-json", "debezium-avro", "debezium-flat", "cdc-json")
PLANNED_FORMATS: tuple[str, ...] = ()

_CDC = "(`cdc-json`) "
_FLAT = "(`debezium-flat`) "
_OP_VALUES = (
    _CDC + "the op field's values meaning insert / update / delete; none empty, no value in "
    "two lists"
)


class CdcJsonConfig(Section):
    """``[source.cdc_json]``: how a generic (non-Debezium) CDC JSON event is read
    (``source.format = "cdc-json"``); every key can be overridden per table under
    ``[tables.<name>]``. See docs/guide/formats.md "Generic CDC JSON"."""

    op_field: str = Field(
        default="_action", min_length=1, description=_CDC + "the event field holding the operation"
    )
    insert_values: list[str] = Field(
        default_factory=lambda: ["_insert"],
        description=_OP_VALUES,
    )
    update_values: list[str] = Field(
        default_factory=lambda: ["_update"],
        description=_OP_VALUES,
    )
    delete_values: list[str] = Field(
        default_factory=lambda: ["_delete"],
        description=_OP_VALUES,
    )
    order_field: str = Field(
        default="_timestamp",
        min_length=1,
        description=_CDC + "the field ordering a key's events, newest wins: integers, decimals "
        "or timestamps (ISO 8601 text)",
    )
    order_type: Literal["auto", "integer", "decimal", "timestamp"] = Field(
        default="auto",
        description=_CDC + "the order values' kind: `auto` (any), or only `integer`, `decimal` "
        "(integers too) or `timestamp`; a value of another kind is a bad message instead of "
        "being mis-ordered",
    )
    key_fields: list[str] = Field(
        default_factory=list,
        description=_CDC + "record-key fields, read from the event; empty: the fields of the "
        "message key (a JSON object)",
    )
    images: Literal["full", "partial"] = Field(
        default="full",
        description=_CDC + "`full`: an event is the whole row (a column it lacks is null); "
        "`partial`: a column it lacks is unchanged, and each column's newest value wins",
    )
    records_field: str = Field(
        default="",
        description=_CDC + "a field holding an array of events per message; empty: a message "
        "is one event",
    )

    @model_validator(mode="after")
    def _ops(self) -> CdcJsonConfig:
        check_cdc_json(self.model_dump())
        return self


def check_cdc_json(values: dict[str, Any]) -> None:
    """The op values must not overlap, and every op needs at least one value."""
    seen: dict[str, str] = {}
    for kind in ("insert_values", "update_values", "delete_values"):
        listed = values.get(kind)
        if listed is None:
            continue
        if not listed:
            raise ValueError(f"{kind} is empty: list at least one value of the op field")
        for value in listed:
            if value in seen and seen[value] != kind:
                raise ValueError(
                    f"{value!r} is in both {seen[value]} and {kind}: an op value must mean one "
                    "operation"
                )
            seen[value] = kind
    names = [values.get("op_field"), values.get("order_field")]
    if names[0] is not None and names[0] == names[1]:
        raise ValueError("op_field and order_field name the same field: they must differ")


class FlattenedConfig(Section):
    """``[source.flattened]``: events written by Debezium's ExtractNewRecordState SMT
    (``source.format = "debezium-flat"``), docs/guide/formats.md "Flattened events"."""

    field_prefix: str = Field(
        default="__",
        min_length=1,
        description=_FLAT + "the prefix of the fields ExtractNewRecordState adds (its "
        "`add.fields.prefix`); such fields never become columns. See "
        "[Flattened events](formats.md#flattened-events)",
    )
    order_field: str | None = Field(
        default=None,
        min_length=1,
        description=_FLAT + "the field that orders events having no `__lsn` / `__file`+`__pos`: "
        'a row column or an added field (e.g. `"__source_ts_ms"`), integers from 0 to 2**62 '
        "or ISO timestamps; newest wins per key",
    )
    arrival_order: bool = Field(
        default=False,
        description=_FLAT + "with no ordering field at all, order by Kafka offset instead of "
        "refusing the events: opt-in, since it is only right while each key stays in one "
        "partition and the producer never reorders (see the limits in "
        "[Flattened events](formats.md#flattened-events))",
    )
