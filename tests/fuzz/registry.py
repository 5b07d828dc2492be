"""What is fuzzed: one entry per message format (``source.format``).

Adding a format to the fuzzing is ONE entry in :data:`FUZZ_TARGETS`: the config fragment
that selects and sets up the format (merged into :data:`BASE_CONFIG`), and a seed file in
``tests/fuzz/seeds/`` holding valid messages of the format. Every fuzz test, the
regression pins and ``python -m tests.fuzz`` pick the entry up; ``test_every_format_is_
fuzzed`` (tests/engine/test_fuzz_decoders.py) fails while ``engine.decode.FORMATS`` has a
format without an entry here.

A seed file is ``{"about": "...", "messages": [...]}``; a message is
``{"name", "topic", "key"|"key_text"|"key_b64", "value"|"value_text"|"value_b64",
"expect"}``, the key and value written as in tests/cases (JSON, raw text, or base64 bytes
e.g. for Avro's wire format; ``null`` is a null key or a tombstone) and ``expect`` what
the message alone decodes to: ``"row"``, ``"ignored"`` (a valid non-row record) or
``"bad"`` (checked by the tests, so a seed cannot rot unnoticed). A seed file of a format
read through a schema registry (``debezium-avro``) also holds ``"registry"``: the writer
schemas by id, served by one test registry per process whose URL goes into the config.
"""

from __future__ import annotations

import atexit
import base64
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SEEDS = Path(__file__).resolve().parent / "seeds"

#: The config every target starts from. The size limit is low so that the giant-string
#: mutations cross it (records over it must become bad messages, never reach a parser).
BASE_CONFIG: dict[str, Any] = {
    "source": {
        "bootstrap_servers": "127.0.0.1:1",
        "topics": ".",
        "max_message_bytes": 256 * 1024,
    },
    "target": {"path": "unused-by-decoding"},
}


@dataclass(frozen=True)
class FuzzTarget:
    """One format to fuzz.

    Attributes:
        config: Config fragment merged into :data:`BASE_CONFIG`; sets ``source.format``
            and whatever else the format's decoder factory reads.
        seeds: File name under ``tests/fuzz/seeds/`` with valid messages of the format.
        apply_topic: The seed topic whose mutated messages tests/engine/test_fuzz_apply.py
            applies with Spark (default: the topic with the most row seeds).
    """

    config: dict[str, Any]
    seeds: str
    apply_topic: str | None = None


#: The fuzz target of the records the replicator reads itself (tests/fuzz/control.py),
#: next to the formats' targets in ``python -m tests.fuzz --format``.
CONTROL_TARGET = "control-records"

#: Fuzz targets by ``source.format``.
FUZZ_TARGETS: dict[str, FuzzTarget] = {
    "debezium-json": FuzzTarget(
        config={"source": {"format": "debezium-json"}},
        seeds="debezium-json.json",
        apply_topic="srv.app.items",
    ),
    "debezium-flat": FuzzTarget(
        config={"source": {"format": "debezium-flat"}},
        seeds="debezium-flat.json",
        apply_topic="srv.app.items",
    ),
    "cdc-json": FuzzTarget(
        config={"source": {"format": "cdc-json", "cdc_json": {"images": "partial"}}},
        seeds="cdc-json.json",
    ),
    "debezium-avro": FuzzTarget(
        config={"source": {"format": "debezium-avro"}},
        seeds="debezium-avro.json",
    ),
}


@dataclass(frozen=True)
class Seed:
    """One seed message: its Kafka topic, raw key and raw value."""

    name: str
    topic: str
    key: bytes | None
    value: bytes | None
    expect: str


def _payload(msg: dict, part: str) -> bytes | None:
    if f"{part}_b64" in msg:
        return base64.b64decode(msg[f"{part}_b64"])
    if f"{part}_text" in msg:
        return str(msg[f"{part}_text"]).encode()
    value = msg.get(part)
    return None if value is None else json.dumps(value).encode()


@cache
def seeds(fmt: str) -> tuple[Seed, ...]:
    """The seed messages of format ``fmt`` (fails loudly when the file is missing)."""
    path = SEEDS / FUZZ_TARGETS[fmt].seeds
    messages = json.loads(path.read_text())["messages"]
    if not messages:
        raise ValueError(f"{path} has no seed messages")
    return tuple(
        Seed(m["name"], m["topic"], _payload(m, "key"), _payload(m, "value"), m["expect"])
        for m in messages
    )


def merged(base: dict, extra: dict) -> dict:
    """``extra`` merged into ``base`` (nested sections merged, values replaced)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@cache
def _registry_url(fmt: str) -> str | None:
    """The URL of a registry serving the seed file's schemas (started once a process)."""
    schemas = json.loads((SEEDS / FUZZ_TARGETS[fmt].seeds).read_text()).get("registry")
    if not schemas:
        return None
    from engine.playground.registry import SchemaRegistry

    registry = SchemaRegistry()
    registry.__enter__()
    atexit.register(registry.__exit__, None, None, None)
    for schema_id, schema in schemas.items():
        registry.register(f"fuzz-{schema_id}", schema, int(schema_id))
    return registry.url


def target_config(fmt: str, **overrides: Any) -> dict[str, Any]:
    """The whole config dict of format ``fmt`` (``overrides`` merged last)."""
    config = merged(BASE_CONFIG, FUZZ_TARGETS[fmt].config)
    url = _registry_url(fmt)
    if url is not None:
        config = merged(config, {"source": {"schema_registry": {"url": url}}})
    return merged(config, overrides)
