"""Where the shared Debezium conformance samples are.

They live next to the repository, in ``../shared/debezium-samples``; ``CDC_DEBEZIUM_SAMPLES``
points elsewhere. A missing folder fails the suite at collection with what to do, so that
the conformance tests can never be skipped quietly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
ENV = "CDC_DEBEZIUM_SAMPLES"


def debezium_samples() -> Path:
    configured = os.environ.get(ENV)
    folder = Path(configured) if configured else REPOSITORY.parent / "shared" / "debezium-samples"
    if not folder.is_dir() or not any(folder.glob("*.json")):
        pytest.fail(
            f"Debezium samples not found in {folder}: check out the shared folder next to the "
            f"repository, or set {ENV} to the folder that holds the *.json samples",
            pytrace=False,
        )
    return folder.resolve()
