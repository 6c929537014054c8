"""What the GPU backends (``gpu``, ``nccl``) and ``kernel-bw`` share: the checks that
refuse a GPU run before anything is measured, CUDA-event timing, and the GPU ceilings.

Ceilings measured in the same run (decimal GB/s, medians of CUDA-event-timed repeats):

* ``gpu_copy_GBps[d]``: device-to-device ``cudaMemcpyAsync`` on device ``d``, bytes read
  plus written (2·S/t), the ceiling for a ring whose nodes share one device;
* ``gpu_reduce_GBps[d]``: the reduction kernel the ring launches (``a op= b`` in place,
  2 reads + 1 write per element: 3·S/t);
* ``gpu_peer_GBps["a->b"]``: ``cudaMemcpyPeerAsync`` from device a to b on b's stream,
  bytes moved (S/t), as p2pBandwidthLatencyTest / nvbandwidth report one direction;
* ``gpu_peer_bidir_GBps["a<->b"]``: both directions at once, total bytes (2·S/t);
* ``gpu_peer_access["a->b"]``: whether a can access b's memory directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import gpu as ring_gpu
from .._optional import MissingDependencyError
from ..gpu.kernels import reducer
from .ceilings import ceiling_bytes
from .cli import BenchInputError

if TYPE_CHECKING:
    from .cli import BenchConfig

__all__ = [
    "check_cupy_dtype",
    "check_device_memory",
    "cupy_or_input_error",
    "device_count_or_input_error",
    "event_times_ms",
    "gpu_ceilings_for",
    "measure_gpu_ceilings",
    "requested_nodes",
]

GPU_CEILING_REPS = 10
GPU_CEILING_WARMUP = 3
_ceiling_cache: dict[tuple, dict] = {}


def cupy_or_input_error(backend: str):
    """CuPy, or a one-line error (exit 2) that says what is missing and how to get it."""
    try:
        return ring_gpu.import_cupy()
    except MissingDependencyError as exc:
        raise BenchInputError(f"backend {backend}: {exc}") from None


def device_count_or_input_error(backend: str) -> int:
    cupy_or_input_error(backend)
    try:
        return ring_gpu.device_count()
    except ring_gpu.DeviceUnavailableError as exc:
        raise BenchInputError(f"backend {backend}: {exc}") from None


def requested_nodes(config: BenchConfig) -> tuple[int, ...]:
    from .runner import DEFAULT_NODES

    return config.nodes or DEFAULT_NODES


def check_cupy_dtype(backend: str, dtype: np.dtype) -> None:
    # CuPy has no long double: the widest float it knows is float64.
    if (dtype.kind == "f" and dtype.itemsize > 8) or (dtype.kind == "c" and dtype.itemsize > 16):
        raise BenchInputError(f"backend {backend}: CuPy has no {dtype.name}; use float64")


def check_device_memory(backend: str, cupy, per_device: dict[int, int]) -> None:
    """Refuse a sweep whose largest point cannot fit on a device, rather than die half-way."""
    for device, need in per_device.items():
        with cupy.cuda.Device(device):
            free, total = cupy.cuda.runtime.memGetInfo()
        if need > free:
            raise BenchInputError(
                f"backend {backend}: the largest point needs about {need / 2**30:.1f} GiB on "
                f"device {device}, which has {free / 2**30:.1f} GiB free of "
                f"{total / 2**30:.1f} GiB: lower -e/--max-bytes or --nodes"
            )


# -- timing on the device ---------------------------------------------------------------------


def event_times_ms(cupy, launch, stream, reps: int, warmup: int) -> np.ndarray:
    """Milliseconds of each of ``reps`` runs of ``launch()`` (which queues work on
    ``stream``, on the current device) between CUDA events recorded on ``stream`` around
    it, after ``warmup`` untimed runs; the host waits once, after the last."""
    for _ in range(warmup):
        launch()
    pairs = [(cupy.cuda.Event(), cupy.cuda.Event()) for _ in range(reps)]
    for start, end in pairs:
        start.record(stream)
        launch()
        end.record(stream)
    pairs[-1][1].synchronize()
    return np.array([cupy.cuda.get_elapsed_time(a, b) for a, b in pairs])


def _median_event_ms(cupy, launch, stream, reps: int, warmup: int) -> float:
    return float(np.median(event_times_ms(cupy, launch, stream, reps, warmup)))


def measure_copy_and_reduce(
    cupy, device: int, nbytes: int, dtype: np.dtype, op: str, reps: int, warmup: int
) -> tuple[float, float]:
    """(copy GB/s, reduce GB/s) on ``device``, bytes read plus written."""
    runtime = cupy.cuda.runtime
    dtype = np.dtype(dtype)
    count = nbytes // dtype.itemsize
    nbytes = count * dtype.itemsize
    kernel = reducer(cupy, op, dtype)
    with cupy.cuda.Device(device):
        arrays = [cupy.ones(count, dtype=dtype), cupy.ones(count, dtype=dtype)]
        src, dst = arrays
        stream = cupy.cuda.Stream(non_blocking=True)
        d2d = runtime.memcpyDeviceToDevice

        def copy():
            runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, d2d, stream.ptr)

        def reduce():
            kernel(dst, src, stream)

        try:
            copy_ms = _median_event_ms(cupy, copy, stream, reps, warmup)
            reduce_ms = _median_event_ms(cupy, reduce, stream, reps, warmup)
        finally:
            stream.synchronize()
            arrays.clear()
            src = dst = None
            cupy.get_default_memory_pool().free_all_blocks()
    return 2 * nbytes / copy_ms / 1e6, 3 * nbytes / reduce_ms / 1e6


def _measure_peer(cupy, a: int, b: int, nbytes: int, reps: int, warmup: int):
    """(a->b GB/s, a<->b GB/s): a peer copy pulled by b's stream, then both directions."""
    runtime = cupy.cuda.runtime
    arrays = []
    with cupy.cuda.Device(a):
        arrays += [cupy.empty(nbytes, dtype=np.uint8) for _ in range(2)]
        stream_a = cupy.cuda.Stream(non_blocking=True)
        joined = cupy.cuda.Event(disable_timing=True)
    with cupy.cuda.Device(b):
        arrays += [cupy.empty(nbytes, dtype=np.uint8) for _ in range(2)]
        stream_b = cupy.cuda.Stream(non_blocking=True)
        forked = cupy.cuda.Event(disable_timing=True)
    on_a, back_a, on_b, back_b = (x.data.ptr for x in arrays)

    def one_way():
        runtime.memcpyPeerAsync(on_b, b, on_a, a, nbytes, stream_b.ptr)

    def both_ways():
        # fork a's stream off b's, copy both ways, join back into b's stream
        forked.record(stream_b)
        stream_a.wait_event(forked)
        runtime.memcpyPeerAsync(on_b, b, on_a, a, nbytes, stream_b.ptr)
        runtime.memcpyPeerAsync(back_a, a, back_b, b, nbytes, stream_a.ptr)
        joined.record(stream_a)
        stream_b.wait_event(joined)

    try:
        with cupy.cuda.Device(b):
            one_ms = _median_event_ms(cupy, one_way, stream_b, reps, warmup)
            both_ms = _median_event_ms(cupy, both_ways, stream_b, reps, warmup)
    finally:
        stream_a.synchronize()
        stream_b.synchronize()
        arrays.clear()
        for d in (a, b):
            with cupy.cuda.Device(d):
                cupy.get_default_memory_pool().free_all_blocks()
    return nbytes / one_ms / 1e6, 2 * nbytes / both_ms / 1e6


def measure_gpu_ceilings(
    nbytes: int,
    dtype: np.dtype,
    op: str,
    devices: Sequence[int],
    *,
    reps: int = GPU_CEILING_REPS,
    warmup: int = GPU_CEILING_WARMUP,
) -> dict[str, Any]:
    """The GPU ceilings of ``devices`` (see the module docstring), cached per run."""
    dtype = np.dtype(dtype)
    nbytes = nbytes // dtype.itemsize * dtype.itemsize
    key = (nbytes, dtype.str, op, tuple(devices), reps, warmup)
    if key in _ceiling_cache:
        return _ceiling_cache[key]
    cupy = ring_gpu.import_cupy()
    runtime = cupy.cuda.runtime
    copy, reduce, peer, bidir, access = {}, {}, {}, {}, {}
    for d in devices:
        copy[str(d)], reduce[str(d)] = measure_copy_and_reduce(
            cupy, d, nbytes, dtype, op, reps, warmup
        )
    for a in devices:
        for b in devices:
            if a == b:
                continue
            can = bool(runtime.deviceCanAccessPeer(a, b))
            access[f"{a}->{b}"] = can
            if can:
                with cupy.cuda.Device(a):
                    ring_gpu.enable_peer_access(runtime, b)
    for a in devices:
        for b in devices:
            if a < b:
                ab, both = _measure_peer(cupy, a, b, nbytes, reps, warmup)
                ba, _ = _measure_peer(cupy, b, a, nbytes, reps, warmup)
                peer[f"{a}->{b}"], peer[f"{b}->{a}"] = ab, ba
                bidir[f"{a}<->{b}"] = both
    result = {
        "gpu_copy_GBps": copy,
        "gpu_reduce_GBps": reduce,
        "gpu_peer_GBps": peer,
        "gpu_peer_bidir_GBps": bidir,
        "gpu_peer_access": access,
        "gpu_buffer_bytes": nbytes,
        "gpu_dtype": dtype.name,
        "gpu_op": op,
        "gpu_reps": reps,
    }
    _ceiling_cache[key] = result
    return result


def gpu_ceilings_for(config: BenchConfig, backend: str) -> dict[str, Any]:
    count = device_count_or_input_error(backend)
    return measure_gpu_ceilings(
        ceiling_bytes(config.max_bytes, config.dtype.itemsize),
        config.dtype,
        config.op,
        list(range(count)),
    )
