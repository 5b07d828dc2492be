"""The Kafka peer itself: a cluster id that begins with "-" (one in 64 random ids) is
formatted and served (the storage tool took it for an option once, on CI)."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from unittest import mock

import pytest

from tests.peers import kafka

pytestmark = [pytest.mark.peers]


def test_a_cluster_id_beginning_with_a_dash_is_formatted(tmp_path: Path) -> None:
    real = uuid.uuid4

    def dash_first() -> uuid.UUID:
        while True:
            value = real()
            if base64.urlsafe_b64encode(value.bytes).startswith(b"-"):
                return value

    with mock.patch.object(kafka.uuid, "uuid4", dash_first):
        broker = kafka.start_kafka(tmp_path / "kafka")
    try:
        assert (tmp_path / "kafka").is_dir() and broker.bootstrap_servers.startswith("127.0.0.1:")
    finally:
        broker.stop()
