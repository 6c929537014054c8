"""The machine's own memory ceilings, measured like STREAM in the same run as the collectives.

Absolute times drift on a shared machine; the ratio of a collective's ``traffic_GBps`` to
these ceilings does not, provided they are measured alike.  So, as STREAM does:

* three kernels, each over arrays of at least 4x the last-level cache (read from
  ``/sys/devices/system/cpu/cpu0/cache``, else ``os.sysconf``, else an assumed 32 MiB,
  recorded with its source), so no array fits in any cache;
* all cores: one thread per usable core, each pinned to its core, each on one slice;
* the best of at least 5 timed trials after one untimed one;
* taken at the start and at the end of every run (the harness keeps both, and flags a run
  whose two measurements differ by more than :data:`DRIFT_LIMIT`).

Byte-counting convention (the same for these kernels and for the collectives' ``traffic``
column): bytes that cross the memory bus, in decimal GB/s.  Every array read counts once,
every array written counts once, and a written array that the kernel does not also read
counts once more (the write-allocate read of each line before it is stored), unless the
stores bypass the cache.  glibc's ``memcpy`` bypasses it only from its non-temporal
threshold up (``glibc.cpu.x86_non_temporal_threshold``; on the reference VM 192 MiB, 3/4 of
the 256 MiB L3 the hypervisor reports), so a copy below that threshold moves 3 bytes per
byte copied and one above it 2.  Hence:

* ``copy``  ``b[:] = a`` (``np.copyto``, glibc ``memcpy``): 3·S below the threshold, 2·S above;
* ``add``   ``a += b`` (``np.add(a, b, out=a)``, the ring's reduction): 2·S read + S written;
  the destination is read anyway, so nothing is allocated on write: 3·S;
* ``triad`` ``a = b + s·c`` in cache-sized blocks (two ufunc calls per block, so ``a`` is
  written to memory once): 2·S read + S write-allocated + S written: 4·S.  Its per-block
  Python calls make it a slight underestimate.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import re
import subprocess
import time
from pathlib import Path

import numpy as np
from numpy.typing import DTypeLike

from ..schedule import chunk_range
from .flags import BenchInputError, parse_size
from .parallel import WorkerPool

__all__ = [
    "CEILING_BYTES_VARIABLE",
    "CEILING_MIN_BYTES",
    "DRIFT_LIMIT",
    "KERNELS",
    "ceiling_bytes",
    "ceiling_drift",
    "copy_traffic_bytes",
    "host_array_bytes",
    "host_ceilings_document",
    "last_level_cache",
    "measure_cpu_ceilings",
    "nontemporal_threshold",
]

# GPU ceilings (ring.bench.gpu_ceilings) size their buffers from the sweep.
CEILING_MIN_BYTES = 64 << 20
KERNELS = ("copy", "add", "triad")
# Arrays at least this many times the last-level cache (STREAM's rule).
LLC_MULTIPLE = 4
LLC_FALLBACK_BYTES = 32 << 20
# The environment variable that overrides the host arrays' size, and its smallest value.
CEILING_BYTES_VARIABLE = "RING_CEILING_BYTES"
CEILING_BYTES_MINIMUM = 64 << 10
HOST_TRIALS = 7
HOST_WARMUP = 1
# A run whose start and end ceilings differ by more than this is flagged.
DRIFT_LIMIT = 0.15
# Triad works in blocks that stay in the last-level cache between its two ufunc calls; smaller
# blocks (L2-sized) cost more in per-call overhead and GIL hand-offs than they save.
TRIAD_BLOCK_BYTES = 1 << 20
TRIAD_SCALAR = 3.0
CONVENTION = (
    "bytes crossing the memory bus: each array read once, each array written once, plus a "
    "write-allocate read of a written array the kernel does not read, unless the stores are "
    "non-temporal (glibc memcpy at or above its non-temporal threshold); "
    "copy 3S (2S at or above the threshold), add a+=b 3S, triad a=b+s*c 4S"
)


def ceiling_bytes(max_bytes: int, itemsize: int) -> int:
    """A GPU ceiling's buffer size: the largest swept size, at least 64 MiB."""
    return max(max_bytes, CEILING_MIN_BYTES) // itemsize * itemsize


_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$")


def _sysfs_size(text: str) -> int | None:
    match = _SIZE.match(text)
    if not match:
        return None
    return int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2)]


@functools.cache
def last_level_cache() -> tuple[int, str]:
    """(bytes, where the number comes from) of the largest data cache of cpu0.

    sysfs first: under a hypervisor glibc's ``sysconf`` may report the host's whole L3 (on the
    reference VM 256 MiB where the guest's CPU has 32 MiB).
    """
    best: tuple[int, int] | None = None
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        folder = Path(index)
        try:
            kind = (folder / "type").read_text().strip()
            level = int((folder / "level").read_text().strip())
            size = _sysfs_size((folder / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size and (best is None or level > best[0]):
            best = (level, size)
    if best is not None:
        return best[1], f"sysfs L{best[0]}"
    for level in (4, 3, 2):
        with contextlib.suppress(ValueError, OSError, AttributeError):
            size = os.sysconf(f"SC_LEVEL{level}_CACHE_SIZE")
            if size and size > 0:
                return int(size), f"sysconf L{level}"
    return LLC_FALLBACK_BYTES, "assumed (no sysfs or sysconf cache size)"


def host_array_bytes() -> int:
    """Bytes of each array of a host ceiling kernel: 4x the last-level cache, unless
    ``RING_CEILING_BYTES`` (a size, at least 64K) says otherwise.

    The variable is for runs that test the plumbing rather than measure (the test suite, CI):
    arrays that fit in a cache make the ceilings the caches' and take milliseconds where 4x a
    large last-level cache takes seconds.  Each measurement records its ``array_bytes``.
    """
    override = os.environ.get(CEILING_BYTES_VARIABLE, "").strip()
    if not override:
        return LLC_MULTIPLE * last_level_cache()[0]
    try:
        nbytes = parse_size(override)
    except BenchInputError as exc:
        raise BenchInputError(f"{CEILING_BYTES_VARIABLE}: {exc}") from None
    if nbytes < CEILING_BYTES_MINIMUM:
        raise BenchInputError(
            f"{CEILING_BYTES_VARIABLE}={override} is below the minimum of "
            f"{CEILING_BYTES_MINIMUM >> 10}K"
        )
    return nbytes


@functools.cache
def nontemporal_threshold() -> tuple[int | None, str]:
    """(bytes, source) from which glibc's memcpy stores past the cache; None if unknown."""
    for loader in sorted(glob.glob("/lib64/ld-linux-x86-64.so.*") + glob.glob("/lib/ld-linux*")):
        try:
            text = subprocess.run(
                [loader, "--list-tunables"], capture_output=True, text=True, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        match = re.search(r"x86_non_temporal_threshold:\s*(0x[0-9a-f]+|\d+)", text)
        if match:
            return int(match.group(1), 0), f"{loader} --list-tunables"
    return None, "unknown (every copy counted with its write-allocate read)"


def copy_traffic_bytes(nbytes: int, threshold: int | None = None) -> int:
    """Memory-bus bytes of one ``memcpy`` of ``nbytes`` (see the module's convention)."""
    if threshold is None:
        threshold = nontemporal_threshold()[0]
    bypasses = threshold is not None and nbytes >= threshold
    return (2 if bypasses else 3) * nbytes


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


def _pin_each(pool: WorkerPool) -> bool:
    """Pin part p's thread to the p-th usable core; False where the OS refuses."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < pool.threads:
        return False
    refused = []

    def pin(part: int) -> None:
        try:
            os.sched_setaffinity(0, {cores[part]})  # 0: the calling thread
        except OSError:
            refused.append(part)

    pool.run(pin, pool.threads)
    return not refused


def _best_seconds(pool: WorkerPool, kernel, parts: int, trials: int, warmup: int) -> float:
    for _ in range(warmup):
        pool.run(kernel, parts)
    best = float("inf")
    for _ in range(trials):
        start = time.perf_counter()
        pool.run(kernel, parts)
        best = min(best, time.perf_counter() - start)
    return best


def _kernels(a: np.ndarray, b: np.ndarray, c: np.ndarray, bounds, block: int) -> dict:
    scalar = a.dtype.type(TRIAD_SCALAR)

    def copy(part: int) -> None:
        lo, hi = bounds[part]
        np.copyto(b[lo:hi], a[lo:hi])

    def add(part: int) -> None:
        lo, hi = bounds[part]
        np.add(a[lo:hi], b[lo:hi], out=a[lo:hi])

    def triad(part: int) -> None:
        lo, hi = bounds[part]
        for start in range(lo, hi, block):
            stop = min(start + block, hi)
            np.multiply(c[start:stop], scalar, out=a[start:stop])
            np.add(a[start:stop], b[start:stop], out=a[start:stop])

    return {"copy": copy, "add": add, "triad": triad}


def measure_cpu_ceilings(
    dtype: DTypeLike = np.float32,
    *,
    array_bytes: int | None = None,
    threads: int | None = None,
    trials: int | None = None,
) -> dict:
    """``copy_GBps``, ``add_GBps`` and ``triad_GBps`` (best of ``trials``) and how they were
    taken.  ``array_bytes`` defaults to :func:`host_array_bytes`."""
    dtype = np.dtype(dtype)
    trials = max(5, HOST_TRIALS if trials is None else trials)
    count = (host_array_bytes() if array_bytes is None else array_bytes) // dtype.itemsize
    nbytes = count * dtype.itemsize
    # Small positive values: add and triad stay finite over a few dozen calls.
    fill = 1 if dtype.kind in "iu" else 1e-3
    a, b, c = (np.full(count, fill, dtype=dtype) for _ in range(3))
    threshold = nontemporal_threshold()[0]
    with _all_cores(), WorkerPool(threads) as pool:
        parts = pool.threads
        pinned = _pin_each(pool)
        bounds = [chunk_range(count, parts, p) for p in range(parts)]
        block = max(1, TRIAD_BLOCK_BYTES // dtype.itemsize)
        kernels = _kernels(a, b, c, bounds, block)
        seconds = {
            name: _best_seconds(pool, kernels[name], parts, trials, HOST_WARMUP) for name in KERNELS
        }
    slice_bytes = [(hi - lo) * dtype.itemsize for lo, hi in bounds]
    moved = {
        "copy": sum(copy_traffic_bytes(s, threshold) for s in slice_bytes),
        "add": 3 * nbytes,
        "triad": 4 * nbytes,
    }
    return {
        **{f"{name}_GBps": moved[name] / seconds[name] / 1e9 for name in KERNELS},
        "threads": parts,
        "pinned": pinned,
        "array_bytes": nbytes,
        "dtype": dtype.name,
        "trials": trials,
        "copy_bytes_per_byte": moved["copy"] / nbytes,
    }


def ceiling_drift(start: dict, end: dict) -> float | None:
    """The largest relative difference of any kernel between two measurements."""
    diffs = []
    for name in KERNELS:
        x, y = start.get(f"{name}_GBps"), end.get(f"{name}_GBps")
        if x and y:
            diffs.append(abs(x - y) / min(x, y))
    return max(diffs) if diffs else None


def host_ceilings_document(start: dict, end: dict | None) -> dict:
    """The JSON's host ceilings: per kernel the better of the two measurements (what the
    series are compared with), and under ``host_memory`` both, the drift and the setup."""
    llc, llc_source = last_level_cache()
    threshold, threshold_source = nontemporal_threshold()
    measured = [m for m in (start, end) if m]
    drift = ceiling_drift(start, end) if end else None
    return {
        **{f"{name}_GBps": max(m[f"{name}_GBps"] for m in measured) for name in KERNELS},
        "host_memory": {
            "convention": CONVENTION,
            "llc_bytes": llc,
            "llc_source": llc_source,
            "nontemporal_threshold_bytes": threshold,
            "nontemporal_threshold_source": threshold_source,
            "start": start,
            "end": end,
            "drift": drift,
            "drift_limit": DRIFT_LIMIT,
            "drifted": drift is not None and drift > DRIFT_LIMIT,
        },
    }
