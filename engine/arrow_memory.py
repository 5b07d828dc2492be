"""Arrow's memory pool in cdcctl's processes: jemalloc, where pyarrow has it.

pyarrow's default pool is mimalloc. On the catch-up benchmark (1M wide events, 2 cores,
six runs interleaved, docs/performance.md) jemalloc was 5-9% faster end to end and the
two merge workers' peak memory 230-320 MiB lower: the workers free a slice's buffers
after each file group, and jemalloc gives those pages back within its decay time (about a
second; ``JE_ARROW_MALLOC_CONF`` with ``dirty_decay_ms:0,muzzy_decay_ms:0`` gives them back
at once, about 0.25 GiB less at peak for some 10% of speed, docs/guide/configuration.md).
The system allocator was as fast and saved less.

A user's own ``ARROW_DEFAULT_MEMORY_POOL`` is left as it is.

The C library's allocator holds what Python allocates itself, the largest being a batch's
joined message values (about 110 MB for 100,000 wide messages). glibc serves a block that
large from a fresh mapping and unmaps it when freed, so every batch page-faulted and zeroed
its buffers anew: joining 103 MB took 80 ms against 20 ms into reused memory.
:func:`keep_freed_memory` has the driver keep them in its heap instead, and keep Arrow's
freed pages for a few batch cycles instead of one second, which each batch page-faulted
anew too (catch-up of 1M wide events 67k -> 76k events/s, ~2.5 CPU-s less, peak memory
+2-5%; docs/performance.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import sys

import pyarrow as pa

#: Arrow reads it when a process first asks for its default pool; Spark's Python
#: workers inherit it from the driver through the JVM.
ENV = "ARROW_DEFAULT_MEMORY_POOL"
#: Arrow's jemalloc settings, when the user gives them.
JEMALLOC_CONF = "JE_ARROW_MALLOC_CONF"
#: How long the driver's jemalloc keeps freed pages: a few batch cycles.
DRIVER_DECAY_MS = 5000
#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Blocks up to this size come from the heap (reused) instead of a mapping of their own...
LARGE_BLOCK_BYTES = 1 << 30
#: ...and up to this much free memory at the heap's top is kept for the next batch.
KEPT_FREE_BYTES = 512 << 20

log = logging.getLogger("cdcctl.memory")


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


def keep_freed_memory() -> bool:
    """Keep a batch's freed memory for the next batch, in this process only (the driver;
    its children keep the defaults): glibc serves large blocks from the heap and keeps up
    to ``KEPT_FREE_BYTES`` free; jemalloc (Arrow) keeps freed pages ``DRIVER_DECAY_MS``
    instead of about a second, unless ``JE_ARROW_MALLOC_CONF`` says otherwise. False
    where the C library is not glibc (jemalloc's setting is made all the same)."""
    if not os.environ.get(JEMALLOC_CONF):  # the user's own settings win
        with contextlib.suppress(NotImplementedError):  # a pyarrow without jemalloc
            pa.jemalloc_set_decay_ms(DRIVER_DECAY_MS)
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = mallopt(_M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES) == 1
    done = mallopt(_M_TRIM_THRESHOLD, KEPT_FREE_BYTES) == 1 and done
    if not done:
        log.debug("the C library refused the large-block settings: left as they were")
    return done
