"""The driver keeps a batch's large buffers in its heap for the next batch
(engine.arrow_memory.keep_freed_memory; its jemalloc half, Arrow's freed pages kept for a
few seconds, shows only under a replicator's steady allocations: bench/catchup.py).

Measured by the kernel: the minor page faults of joining 64 MiB of message values a
second time, in a child process each (the setting is process-wide). Without the setting
glibc maps and zeroes the block anew (~16,000 faults of 4 KiB pages); with it, the freed
block is reused.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from engine.arrow_memory import KEPT_FREE_BYTES, LARGE_BLOCK_BYTES

CHILD = """
import resource, sys
from engine.arrow_memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
values = [b"x" * 1000] * (64 * 1024)  # 64 MiB once joined, as a batch's message values
joined = b"\\n".join(values)
del joined
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
joined = b"\\n".join(values)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _second_join_faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_a_second_batch_reuses_the_first_batchs_memory() -> None:
    assert 64 << 20 < KEPT_FREE_BYTES < LARGE_BLOCK_BYTES
    fresh = _second_join_faults("default")
    kept = _second_join_faults("keep")
    # 64 MiB in 4 KiB pages is 16,384 faults (fewer with huge pages: then this test
    # would say so instead of passing on a machine where the setting matters less).
    assert fresh > 8_000, f"the default allocator faulted only {fresh} times"
    assert kept < 500, f"the kept heap still faulted {kept} times"
