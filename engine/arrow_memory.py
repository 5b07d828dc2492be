"""Arrow's memory pool in cdcctl's processes: jemalloc, where pyarrow has it.

pyarrow's default pool is mimalloc. On the catch-up benchmark (1M wide events, 2 cores,
six runs interleaved, docs/performance.md) jemalloc was 5-9% faster end to end and the
two merge workers' peak memory 230-320 MiB lower: the workers free a slice's buffers
after each file group, and jemalloc gives those pages back within its decay time (about a
second; ``JE_ARROW_MALLOC_CONF`` with ``dirty_decay_ms:0,muzzy_decay_ms:0`` gives them back
at once, about 0.25 GiB less at peak for some 10% of speed, docs/guide/configuration.md).
The system allocator was as fast and saved less.

A user's own ``ARROW_DEFAULT_MEMORY_POOL`` is left as it is.
"""

from __future__ import annotations

import os

import pyarrow as pa

#: Arrow reads it when a process first asks for its default pool; Spark's Python
#: workers inherit it from the driver through the JVM.
ENV = "ARROW_DEFAULT_MEMORY_POOL"


def use_jemalloc() -> str:
    """Make jemalloc Arrow's pool in this process and in the processes it starts (unless
    ``ARROW_DEFAULT_MEMORY_POOL`` is set or pyarrow lacks jemalloc); the pool's name."""
    if os.environ.get(ENV):
        return pa.default_memory_pool().backend_name
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        return pa.default_memory_pool().backend_name
    pa.set_memory_pool(pool)
    os.environ[ENV] = "jemalloc"
    return pool.backend_name
