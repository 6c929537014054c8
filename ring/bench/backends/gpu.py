"""Backend ``gpu`` of the harness: our ring on CuPy devices.

Registered through the ``ring.bench.backends`` entry point ``gpu`` (see pyproject.toml);
its ceilings are measured by :mod:`ring.bench.gpu_ceilings`.  Each call is timed on the
device with the communicator's own CUDA events, from the moment every input is ready to
the moment the last node finishes; the inputs are restored before each call on the
caller's stream, which the collective waits for, so the copy stays outside the timed
region.  Results are copied to the host and validated there by the harness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import gpu as ring_gpu
from ...gpu.run import streams_for
from ..algorithms import library_algorithms
from ..cli import BenchInputError
from ..gpu_ceilings import (
    check_cupy_dtype,
    check_device_memory,
    cupy_or_input_error,
    device_count_or_input_error,
    gpu_ceilings_for,
    requested_nodes,
)
from .base import Backend, DeviceSession, Session, register_backend

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = [
    "GpuRingBackend",
    "GpuRingSession",
    "force_peer_copies_requested",
    "graphs_requested",
    "shared_devices_requested",
    "streams_requested",
]


def graphs_requested(config: BenchConfig) -> tuple[bool, ...]:
    """``--graphs`` (the gpu backend's flag): 0, 1 or a comma list of them."""
    text = getattr(config, "graphs", "1")
    values = [item.strip() for item in str(text).split(",")]
    if not values or any(v not in ("0", "1") for v in values):
        raise BenchInputError(f"--graphs takes 0, 1 or a comma list of them (0,1), got {text!r}")
    return tuple(v == "1" for v in dict.fromkeys(values))


def shared_devices_requested(config: BenchConfig) -> bool:
    """``--shared-devices 1`` (the gpu backend's own flag): several nodes may share one
    device, round-robin."""
    value = getattr(config, "shared_devices", "0")
    if value not in ("0", "1"):
        raise BenchInputError(f"--shared-devices must be 0 or 1, got {value!r}")
    return value == "1"


def force_peer_copies_requested(config: BenchConfig) -> bool:
    """``--force-peer-copies 1``: nodes sharing a device still copy every received range
    into scratch first, as between two GPUs."""
    value = getattr(config, "force_peer_copies", "0")
    if value not in ("0", "1"):
        raise BenchInputError(f"--force-peer-copies must be 0 or 1, got {value!r}")
    return value == "1"


def streams_requested(config: BenchConfig) -> int | None:
    """``--streams N``: CUDA streams per node; empty for the backend's choice per algorithm."""
    text = str(getattr(config, "streams", "") or "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise BenchInputError(
            f"--streams takes a whole number >= 1 (streams per node), got {text!r}"
        )
    return int(text)


class GpuRingSession(DeviceSession):
    """Working buffers and their pristine inputs live on each node's device."""

    def __init__(
        self, nodes: int, config: BenchConfig, shared: bool, graphs: bool, algorithm: str = "ring"
    ):
        self.cupy = ring_gpu.import_cupy()
        self.communicator = ring_gpu.GpuCommunicator(
            nodes,
            shared_devices=shared,
            graphs=graphs,
            algorithm=algorithm,
            force_peer_copies=force_peer_copies_requested(config),
            streams=streams_requested(config),
        )
        self.algorithm = algorithm
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

    def row_extras(self) -> dict[str, Any]:
        return {
            "devices": " ".join(map(str, self.communicator.devices)),
            "graphs": int(self.communicator.graphs.enabled),
            "force_peer_copies": int(self.communicator.force_peer_copies),
            "streams": streams_for(self.algorithm, self.communicator.streams),
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
        "a stream per node (--streams) and CUDA events; --shared-devices 1 puts several "
        "nodes on one device round-robin"
    )
    # Logical nodes on one device read their neighbour in place: the schedule's own bytes.
    # Between devices each received chunk is first copied into scratch (2 more per element
    # in reduce-scatter); busbw is the measure there.
    traffic = "5(N-1)·S"
    sync_modes = ("pairwise",)
    algorithms = library_algorithms()
    extra_columns = ("devices", "graphs", "force_peer_copies", "streams")

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

        parser.add_argument(
            "--force-peer-copies",
            default="0",
            help=(
                "backend gpu: 1 makes nodes that share a device copy each received range into "
                "scratch before reducing it, as between two GPUs (CSV column "
                "force_peer_copies); default 0: read it in place"
            ),
        )
        parser.add_argument(
            "--streams",
            default="",
            help=(
                "backend gpu: CUDA streams per node (CSV column streams); default: 2 for "
                "ring-segmented, whose blocks then overlap, 1 for the other algorithms"
            ),
        )

    def variants(self, config: BenchConfig, algorithm: str = "") -> tuple[dict[str, Any], ...]:
        return tuple({"graphs": value} for value in graphs_requested(config))

    def check(self, config: BenchConfig, world) -> None:
        shared = shared_devices_requested(config)
        graphs_requested(config)
        force_peer_copies_requested(config)
        streams_requested(config)
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

    def traffic_bytes(self, nbytes: int, nodes: int) -> int | None:
        # The plain ring's; the other algorithms' traffic is not modelled.
        return 5 * (nodes - 1) * nbytes if self.algorithm in ("", "ring") else None

    def ceilings(self, config: BenchConfig, world) -> dict[str, Any]:
        return gpu_ceilings_for(config, self.name)

    def traffic_ceiling(self, ceilings: dict[str, Any]) -> tuple[str, float | None]:
        # Logical nodes' buffers live in device memory: the slowest device's copy bandwidth.
        copies = [v for v in (ceilings.get("gpu_copy_GBps") or {}).values() if v]
        return "device copy", min(copies) if copies else None

    def session_out_of_place(self) -> str | None:
        return GpuRingSession.out_of_place

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        graphs = self.variant.get("graphs", graphs_requested(config)[0])
        shared = shared_devices_requested(config)
        return GpuRingSession(nodes, config, shared, graphs, self.algorithm or "ring")
