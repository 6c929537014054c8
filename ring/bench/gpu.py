"""Backend ``gpu`` of the harness (our ring on CuPy devices) and the GPU ceilings.

Registered through the ``ring.bench.backends`` entry point ``gpu`` (see pyproject.toml).
Each call is timed on the device with the
communicator's own CUDA events, from the moment every input is ready to the moment the
last node finishes; the inputs are restored before each call on the caller's stream,
which the collective waits for, so the copy stays outside the timed region.  Results
are copied to the host and validated there by the harness.

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
from ..gpu_kernels import reducer
from .backends import Backend, Session, register_backend
from .ceilings import ceiling_bytes
from .cli import BenchInputError

if TYPE_CHECKING:
    from .cli import BenchConfig

__all__ = [
    "GpuRingBackend",
    "cupy_or_input_error",
    "device_count_or_input_error",
    "measure_gpu_ceilings",
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


def shared_devices_requested(config: BenchConfig) -> bool:
    """``--shared-devices 1`` (the gpu backend's own flag): several nodes may share one
    device, round-robin."""
    value = getattr(config, "shared_devices", "0")
    if value not in ("0", "1"):
        raise BenchInputError(f"--shared-devices must be 0 or 1, got {value!r}")
    return value == "1"


def graphs_requested(config: BenchConfig) -> tuple[bool, ...]:
    """``--graphs`` (the gpu backend's flag): 0, 1 or a comma list of them."""
    text = getattr(config, "graphs", "1")
    values = [item.strip() for item in str(text).split(",")]
    if not values or any(v not in ("0", "1") for v in values):
        raise BenchInputError(f"--graphs takes 0, 1 or a comma list of them (0,1), got {text!r}")
    return tuple(v == "1" for v in dict.fromkeys(values))


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


def _median_event_ms(cupy, launch, stream, reps: int, warmup: int) -> float:
    """Median of ``reps`` CUDA-event-timed runs of ``launch()`` (which queues work on
    ``stream``, on the current device)."""
    for _ in range(warmup):
        launch()
    pairs = []
    for _ in range(reps):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        launch()
        end.record(stream)
        pairs.append((start, end))
    pairs[-1][1].synchronize()
    return float(np.median([cupy.cuda.get_elapsed_time(a, b) for a, b in pairs]))


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


# -- the gpu backend -----------------------------------------------------------------------


class GpuRingSession(Session):
    """Working buffers and their pristine inputs live on each node's device."""

    def __init__(self, nodes: int, config: BenchConfig, shared: bool, graphs: bool):
        self.cupy = ring_gpu.import_cupy()
        self.communicator = ring_gpu.GpuCommunicator(nodes, shared_devices=shared, graphs=graphs)
        self.shared_devices = self.communicator.shared_devices
        self.op = config.op
        self.buffers: list = []
        self._inputs: list = []
        self._times: list[float] = []

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        cupy = self.cupy
        self.buffers, self._inputs = [], []
        self._times = []
        for values, device in zip(inputs, self.communicator.devices, strict=True):
            with cupy.cuda.Device(device):
                pristine = cupy.asarray(values)
                self._inputs.append(pristine)
                self.buffers.append(cupy.empty_like(pristine))

    def restore(self) -> None:
        # On each device's current stream: the collective waits for it before its timed
        # region starts.
        cupy = self.cupy
        runtime = cupy.cuda.runtime
        for buffer, pristine, device in zip(
            self.buffers, self._inputs, self.communicator.devices, strict=True
        ):
            with cupy.cuda.Device(device):
                runtime.memcpyAsync(
                    buffer.data.ptr,
                    pristine.data.ptr,
                    pristine.nbytes,
                    runtime.memcpyDeviceToDevice,
                    cupy.cuda.get_current_stream(device).ptr,
                )

    def call(self) -> None:
        self.communicator.allreduce(self.buffers, self.op)

    def timed_call(self) -> None:
        self.communicator.allreduce(self.buffers, self.op)
        self._times.append(self.communicator.last_elapsed_ms() / 1e3)

    def times(self) -> list[float]:
        return list(self._times)

    def results(self) -> list[np.ndarray]:
        return [self.cupy.asnumpy(buffer) for buffer in self.buffers]

    def keep_sample(self, windows: Sequence[tuple[int, int]]) -> None:
        # Only the windows come back: a whole-buffer copy per call would dwarf the call.
        kept = self.__dict__.setdefault("_samples", [])
        asnumpy = self.cupy.asnumpy
        kept.append(
            [np.concatenate([asnumpy(b[lo:hi]) for lo, hi in windows]) for b in self.buffers]
        )

    def row_extras(self) -> dict[str, Any]:
        return {
            "devices": " ".join(map(str, self.communicator.devices)),
            "graphs": int(self.communicator.graphs.enabled),
        }

    def close(self) -> None:
        self.buffers, self._inputs = [], []
        self.communicator.close()
        for device in sorted(set(self.communicator.devices)):
            with self.cupy.cuda.Device(device):
                self.cupy.get_default_memory_pool().free_all_blocks()


@register_backend
class GpuRingBackend(Backend):
    name = "gpu"
    description = (
        "our ring on CuPy devices (ring.gpu.GpuCommunicator): node i on device i, "
        "cudaMemcpyPeerAsync between devices, one elementwise kernel per received chunk, "
        "a stream per node and pairwise CUDA events; --shared-devices 1 puts several "
        "nodes on one device round-robin"
    )
    # Logical nodes on one device read their neighbour in place: the schedule's own bytes.
    # Between devices each received chunk is first copied into scratch (2 more per element
    # in reduce-scatter); busbw is the measure there.
    traffic = "5(N-1)·S"
    sync_modes = ("pairwise",)
    extra_columns = ("devices", "graphs")

    @classmethod
    def add_arguments(cls, parser) -> None:
        parser.add_argument(
            "--shared-devices",
            default="0",
            help=(
                "backend gpu: 1 lets several nodes share one CUDA device, round-robin, when "
                "--nodes exceeds the devices there are (rows say shared_devices=true); "
                "default 0: one device per node"
            ),
        )
        parser.add_argument(
            "--graphs",
            default="1",
            help=(
                "backend gpu: 1 captures each repeated collective once as a CUDA graph and "
                "replays it (from the second call on the same buffers: keep -w at 2 or more), 0 "
                "enqueues every step from the host; a comma list (0,1) "
                "measures each in turn (CSV column graphs); default 1"
            ),
        )

    def variants(self, config: BenchConfig) -> tuple[dict[str, Any], ...]:
        return tuple({"graphs": value} for value in graphs_requested(config))

    def check(self, config: BenchConfig, world) -> None:
        shared = shared_devices_requested(config)
        graphs_requested(config)
        cupy = cupy_or_input_error(self.name)
        available = device_count_or_input_error(self.name)
        check_cupy_dtype(self.name, config.dtype)
        need: dict[int, int] = {}
        largest = config.sizes[-1]
        for nodes in requested_nodes(config):
            if nodes > available and not shared:
                raise BenchInputError(
                    f"backend gpu: --nodes {nodes} needs {nodes} CUDA devices but this machine "
                    f"has {available}; add --shared-devices 1 to place several nodes on one "
                    "device, round-robin (the rows then say shared_devices=true)"
                )
            devices = ring_gpu.node_devices(nodes, None, shared, available)
            per_node = 2 * largest  # working buffer + pristine input
            here: dict[int, int] = {}
            for device in devices:
                here[device] = here.get(device, 0) + per_node
            for device, nbytes in here.items():
                need[device] = max(need.get(device, 0), nbytes)
        check_device_memory(self.name, cupy, need)

    def traffic_bytes(self, nbytes: int, nodes: int) -> int:
        return 5 * (nodes - 1) * nbytes

    def ceilings(self, config: BenchConfig, world) -> dict[str, Any]:
        return gpu_ceilings_for(config, self.name)

    def traffic_ceiling(self, ceilings: dict[str, Any]) -> tuple[str, float | None]:
        # Logical nodes' buffers live in device memory: the slowest device's copy bandwidth.
        copies = [v for v in (ceilings.get("gpu_copy_GBps") or {}).values() if v]
        return "device copy", min(copies) if copies else None

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        graphs = self.variant.get("graphs", graphs_requested(config)[0])
        return GpuRingSession(nodes, config, shared_devices_requested(config), graphs)
