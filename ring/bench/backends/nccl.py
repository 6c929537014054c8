"""Backend ``nccl`` of the harness: NCCL's allreduce, what a CUDA user would call instead.

One communicator per device from ``cupy.cuda.nccl.NcclCommunicator.initAll(devices)``,
node i on device i; every call is ``ncclAllReduce`` in place on each device's stream
between ``groupStart()`` and ``groupEnd()`` (one host thread drives every device).  It is
timed like the ``gpu`` backend, with CUDA events on device 0's stream around a fork of
every device's stream and the join of them all; the inputs are restored on each device's
stream before the fork, outside the timed region.  Unlike ``gpu``, the host does not wait
between calls: it synchronises once, when the times are read.

NCCL picks ring or tree per size; for a ring-against-ring comparison run with
``NCCL_ALGO=Ring`` in the environment (the JSON records ``NCCL_ALGO`` and ``NCCL_PROTO``
under ``backends.nccl``).  NCCL cannot put two ranks on one device, so ``--nodes`` may not
exceed the number of GPUs.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import gpu as ring_gpu
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

__all__ = ["NcclBackend"]

# NumPy dtype name -> name of the NCCL datatype constant in cupy.cuda.nccl
NCCL_DTYPES = {
    "int8": "NCCL_INT8",
    "uint8": "NCCL_UINT8",
    "int32": "NCCL_INT32",
    "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64",
    "uint64": "NCCL_UINT64",
    "float16": "NCCL_FLOAT16",
    "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64",
}
NCCL_OPS = {
    "sum": "NCCL_SUM",
    "prod": "NCCL_PROD",
    "max": "NCCL_MAX",
    "min": "NCCL_MIN",
    "avg": "NCCL_AVG",
}
NCCL_ENVIRONMENT = ("NCCL_ALGO", "NCCL_PROTO")


def nccl_module():
    """``cupy.cuda.nccl`` with NCCL loaded, or a one-line error saying what is missing."""
    cupy_or_input_error("nccl")
    with warnings.catch_warnings():
        # CuPy warns when libnccl is missing; the error below says it in one line.
        warnings.simplefilter("ignore")
        from cupy.cuda import nccl
    if not getattr(nccl, "available", False) or not hasattr(nccl, "NcclCommunicator"):
        raise BenchInputError(
            "backend nccl: CuPy cannot load the NCCL library; install it with: "
            "pip install nvidia-nccl-cu12 (or nvidia-nccl-cu13 to match CuPy's CUDA)"
        )
    return nccl


class NcclSession(DeviceSession):
    # NCCL reduces out of place itself: no copy, the send buffers are the pristine inputs.
    out_of_place = "NCCL's own allReduce(send, recv)"

    def __init__(self, nodes: int, config: BenchConfig):
        self.nccl = nccl_module()
        self.cupy = ring_gpu.import_cupy()
        self.devices = list(range(nodes))
        self.datatype = getattr(self.nccl, NCCL_DTYPES[config.dtype.name])
        self.op = getattr(self.nccl, NCCL_OPS[config.op])
        self.communicators = self.nccl.NcclCommunicator.initAll(self.devices)
        cuda = self.cupy.cuda
        self.streams, self.restored, self.finished = [], [], []
        for device in self.devices:
            with cuda.Device(device):
                self.streams.append(cuda.Stream(non_blocking=True))
                self.restored.append(cuda.Event(disable_timing=True))
                self.finished.append(cuda.Event(disable_timing=True))
        with cuda.Device(self.devices[0]):
            self.gate = cuda.Event(disable_timing=True)
        self.buffers: list = []
        self._inputs: list = []
        self._pending: list[tuple] = []

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        self.synchronize()
        cupy = self.cupy
        self.buffers, self._inputs, self._pending = [], [], []
        for values, device in zip(inputs, self.devices, strict=True):
            with cupy.cuda.Device(device):
                pristine = cupy.asarray(values)
                self._inputs.append(pristine)
                self.buffers.append(cupy.empty_like(pristine))
            # asarray copied on the current stream; the session's streams start after it
            cupy.cuda.Device(device).synchronize()

    def restore(self) -> None:
        runtime = self.cupy.cuda.runtime
        for i in range(len(self.devices)):
            runtime.memcpyAsync(
                self.buffers[i].data.ptr,
                self._inputs[i].data.ptr,
                self._inputs[i].nbytes,
                runtime.memcpyDeviceToDevice,
                self.streams[i].ptr,
            )
            self.restored[i].record(self.streams[i])

    def _allreduce(self, start, end, out_of_place: bool = False) -> None:
        """Fork every stream off device 0's (after every restore), allreduce, join back;
        ``out_of_place``: NCCL's own, from the pristine inputs (send) into the working
        buffers (receive)."""
        runtime = self.cupy.cuda.runtime
        first = self.streams[0]
        runtime.setDevice(self.devices[0])
        for event in self.restored[1:]:
            first.wait_event(event)
        start.record(first)
        for stream in self.streams[1:]:
            stream.wait_event(start)
        count = self.buffers[0].size
        self.nccl.groupStart()
        try:
            sends = self._inputs if out_of_place else self.buffers
            for communicator, send, buffer, stream in zip(
                self.communicators, sends, self.buffers, self.streams, strict=True
            ):
                ptr = buffer.data.ptr
                communicator.allReduce(
                    send.data.ptr, ptr, count, self.datatype, self.op, stream.ptr
                )
        finally:
            self.nccl.groupEnd()
        for i in range(1, len(self.devices)):
            self.finished[i].record(self.streams[i])
            first.wait_event(self.finished[i])
        end.record(first)

    def call(self) -> None:
        # Untimed: one event serves as fork and join (a wait captures the record before it).
        self._allreduce(self.gate, self.gate)

    def timed_call(self, out_of_place: bool = False) -> None:
        cuda = self.cupy.cuda
        with cuda.Device(self.devices[0]):
            start, end = cuda.Event(), cuda.Event()
        self._allreduce(start, end, out_of_place)
        self._pending.append((start, end))

    def timed_out_of_place(self) -> None:
        self.timed_call(out_of_place=True)

    def times(self) -> list[float]:
        if self._pending:
            self._pending[-1][1].synchronize()
        get = self.cupy.cuda.get_elapsed_time
        return [get(start, end) / 1e3 for start, end in self._pending]

    def synchronize(self) -> None:
        for stream in getattr(self, "streams", []):
            stream.synchronize()

    def results(self) -> list[np.ndarray]:
        self.synchronize()
        return [self.cupy.asnumpy(buffer) for buffer in self.buffers]

    def row_extras(self) -> dict[str, Any]:
        return {"devices": " ".join(map(str, self.devices))}

    def close(self) -> None:
        self.synchronize()
        self.buffers, self._inputs, self._pending = [], [], []
        for communicator in self.communicators:
            communicator.destroy()
        self.communicators = []
        for device in self.devices:
            with self.cupy.cuda.Device(device):
                self.cupy.get_default_memory_pool().free_all_blocks()


@register_backend
class NcclBackend(Backend):
    name = "nccl"
    description = (
        "NCCL allreduce in place (cupy.cuda.nccl, NcclCommunicator.initAll, one device per "
        "node, groupStart/groupEnd); set NCCL_ALGO=Ring to compare ring with ring"
    )
    traffic = None  # NCCL's own kernels and protocol buffers are hidden from us
    extra_columns = ("devices",)

    def check(self, config: BenchConfig, world) -> None:
        cupy = cupy_or_input_error(self.name)
        available = device_count_or_input_error(self.name)
        nccl = nccl_module()
        check_cupy_dtype(self.name, config.dtype)
        if not hasattr(nccl, NCCL_OPS[config.op]):
            raise BenchInputError(
                f"backend nccl: this CuPy's NCCL binding has no {NCCL_OPS[config.op]} "
                f"(op {config.op!r}; ncclAvg needs NCCL >= 2.10 and a CuPy that exposes it)"
            )
        if config.dtype.name not in NCCL_DTYPES:
            raise BenchInputError(
                f"backend nccl: NCCL has no {config.dtype.name}; use one of "
                f"{', '.join(NCCL_DTYPES)}"
            )
        largest = max(requested_nodes(config))
        if largest > available:
            raise BenchInputError(
                f"backend nccl: --nodes {largest} needs {largest} CUDA devices (NCCL puts one "
                f"rank on each) but this machine has {available}"
            )
        per_device = 2 * config.sizes[-1]
        check_device_memory(self.name, cupy, dict.fromkeys(range(largest), per_device))

    def ceilings(self, config: BenchConfig, world) -> dict[str, Any]:
        return gpu_ceilings_for(config, self.name)

    def session_out_of_place(self) -> str | None:
        return NcclSession.out_of_place

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return NcclSession(nodes, config)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        described = super().describe()
        described["environment"] = {name: os.environ.get(name) for name in NCCL_ENVIRONMENT}
        try:
            described["nccl_version"] = nccl_module().get_version()
        except BenchInputError:
            described["nccl_version"] = None
        return described
