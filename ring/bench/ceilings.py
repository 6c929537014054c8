"""The machine's own memory ceilings, measured in the same run as the collectives.

Absolute times drift on a shared machine; the ratio of a collective's ``traffic_GBps``
to these ceilings does not.  Both kernels run on as many threads as the process may use,
each on one part of a buffer large enough to leave the caches.
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np

from ..schedule import chunk_range
from .parallel import WorkerPool

__all__ = ["CEILING_MIN_BYTES", "ceiling_bytes", "measure_cpu_ceilings"]

CEILING_MIN_BYTES = 64 << 20
CEILING_REPS = 10
CEILING_WARMUP = 2


def ceiling_bytes(max_bytes: int, itemsize: int) -> int:
    """The buffer size: the largest swept size, at least 64 MiB."""
    return max(max_bytes, CEILING_MIN_BYTES) // itemsize * itemsize


@contextlib.contextmanager
def _all_cores():
    """Let the pool's threads (which inherit this thread's mask) use every core, even when
    mpirun has bound this rank to one: the ceiling is the machine's, not the rank's."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:  # pragma: no cover - not Linux
        yield
        return
    before = getter(0)
    # OSError: a cpuset narrower than cpu_count(); keep what we have
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _median_seconds(pool: WorkerPool, kernel, parts: int, reps: int, warmup: int) -> float:
    for _ in range(warmup):
        pool.run(kernel, parts)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        pool.run(kernel, parts)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure_cpu_ceilings(
    nbytes: int,
    dtype: np.dtype,
    *,
    threads: int | None = None,
    reps: int = CEILING_REPS,
    warmup: int = CEILING_WARMUP,
) -> dict:
    """``copy_GBps`` (dst = src: S read + S written) and ``add_GBps`` (a += b in place:
    2S read + S written), in decimal GB/s of bytes read plus written, medians of ``reps``."""
    dtype = np.dtype(dtype)
    count = nbytes // dtype.itemsize
    nbytes = count * dtype.itemsize
    src = np.ones(count, dtype=dtype)
    dst = np.ones(count, dtype=dtype)
    with _all_cores(), WorkerPool(threads) as pool:
        parts = pool.threads
        bounds = [chunk_range(count, parts, p) for p in range(parts)]

        def copy(part: int) -> None:
            a, b = bounds[part]
            np.copyto(dst[a:b], src[a:b])

        def add(part: int) -> None:
            a, b = bounds[part]
            np.add(dst[a:b], src[a:b], out=dst[a:b])

        copy_s = _median_seconds(pool, copy, parts, reps, warmup)
        # dst grows by one per call: no overflow or denormals in a few dozen calls.
        add_s = _median_seconds(pool, add, parts, reps, warmup)
    return {
        "copy_GBps": 2 * nbytes / copy_s / 1e9,
        "add_GBps": 3 * nbytes / add_s / 1e9,
        "cpu_threads": parts,
        "cpu_buffer_bytes": nbytes,
        "cpu_dtype": dtype.name,
        "cpu_reps": reps,
    }
