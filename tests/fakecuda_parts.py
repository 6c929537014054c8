"""The objects of the CUDA stand-in (``fakecuda``): its error, streams, events, stream
capture and graphs, arrays, ufuncs and raw kernels, and ``fake_cupy``, which installs a
simulated machine as the ``cupy`` module."""

from __future__ import annotations

import contextlib
import re
import sys
import types
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fakecuda import FakeCuda

__all__ = [
    "RAW_KERNEL_OPS",
    "CUDARuntimeError",
    "FakeArray",
    "FakeCapture",
    "FakeEvent",
    "FakeGraph",
    "FakeRawKernel",
    "FakeStream",
    "FakeUfunc",
    "NullStream",
    "fake_cupy",
]


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int, message: str = ""):
        self.status = status
        super().__init__(f"CUDA error {status}: {message}")


class NullStream:
    """``cupy.cuda.Stream.null``: the legacy default stream of whichever device is current
    when it is used (device -1)."""

    ptr = 0
    device_id = -1

    def __init__(self, sim):
        self.sim = sim

    def _legacy(self) -> FakeStream:
        return self.sim.legacy_stream(self.sim.current)

    def wait_event(self, event: FakeEvent) -> None:
        self._legacy().wait_event(event)

    def synchronize(self) -> None:
        self._legacy().synchronize()

    def __enter__(self):
        # Current again: the default, so kernels go to the legacy stream.
        self._device = self.sim.current
        self._previous = self.sim.current_streams.pop(self._device, None)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            self.sim.current_streams[self._device] = self._previous


class FakeStream:
    def __init__(self, sim: FakeCuda, device: int, ptr: int):
        self.sim = sim
        self.device_id = device
        self.ptr = ptr
        self.queue: deque = deque()
        self.rank = sim.rng.random() if sim.priority else 0.0
        self._stack: list = []
        self.capture: FakeCapture | None = None

    def enqueue(self, op) -> None:
        if self.capture is not None:
            self.capture.add(self, op)  # captured into the graph, not run
        else:
            self.queue.append(op)
            if self.sim.trace is not None:
                self.sim.trace.append((self, op))

    # -- graph capture: the rules of CUDA's stream capture that the ring relies on ----------

    def begin_capture(self, mode=None) -> None:
        if self.ptr == 0:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if self.capture is not None:
            raise CUDARuntimeError(900, "cudaErrorIllegalState: the stream is capturing")
        if self.sim.capture_fails == "begin":
            raise CUDARuntimeError(801, "cudaErrorNotSupported: stream capture")
        self.capture = FakeCapture(self.sim, self)

    def is_capturing(self) -> bool:
        return self.capture is not None

    def end_capture(self):
        capture = self.capture
        if capture is None or capture.origin is not self:
            raise CUDARuntimeError(900, "cudaErrorIllegalState: not the capture's origin")
        capture.close()
        if capture.invalid:
            raise CUDARuntimeError(901, f"cudaErrorStreamCaptureInvalidated: {capture.invalid}")
        unjoined = capture.unjoined()
        if unjoined:
            raise CUDARuntimeError(904, f"cudaErrorStreamCaptureUnjoined: streams {unjoined}")
        if self.sim.capture_fails == "end":
            raise CUDARuntimeError(901, "cudaErrorStreamCaptureInvalidated")
        return FakeGraph(self.sim, capture)

    def __enter__(self):
        if self.device_id != self.sim.current:
            raise RuntimeError(
                f"The device that the stream is created on ({self.device_id}) does not "
                f"match with the current device ({self.sim.current})"
            )
        self._stack.append(self.sim.current_streams.get(self.device_id))
        self.sim.current_streams[self.device_id] = self
        return self

    def __exit__(self, *exc):
        previous = self._stack.pop()
        if previous is None:
            self.sim.current_streams.pop(self.device_id, None)
        else:
            self.sim.current_streams[self.device_id] = previous

    def wait_event(self, event: FakeEvent) -> None:
        self.sim.waits.append((self, event))
        if self.sim.drop_waits or len(self.sim.waits) - 1 == self.sim.drop_wait:
            return
        capture = event.capture
        if capture is not None:
            # An event recorded inside a capture: waiting on it joins (forks) the capture.
            if self.capture is None:
                capture.join(self)
            elif self.capture is not capture:
                self.capture.fail("a wait on another capture's event")
            capture.add(self, ("wait", event, capture.occurrences[event]))
        elif self.capture is not None:
            self.capture.fail("a wait on an event recorded outside the capture")
            raise CUDARuntimeError(905, "cudaErrorStreamCaptureIsolation")
        else:
            self.enqueue(("wait", event, event.recorded))

    def synchronize(self) -> None:
        if self.capture is not None:
            self.capture.fail("synchronize on a capturing stream")
            raise CUDARuntimeError(900, "cudaErrorStreamCaptureUnsupported")
        self.sim.host_waits += 1
        self.sim.run_until(lambda: not self.queue)


class FakeEvent:
    def __init__(self, sim: FakeCuda, device: int, timing: bool):
        self.sim = sim
        self.device = device
        self.timing = timing
        self.recorded = 0  # records enqueued
        self.completed = 0  # records that have run
        self.time = None
        self.capture: FakeCapture | None = None  # the open capture it was last recorded in

    def record(self, stream=None) -> None:
        sim = self.sim
        target = sim.legacy_stream(sim.current) if stream is None or stream.ptr == 0 else stream
        if target.device_id != self.device:
            raise CUDARuntimeError(
                400, f"event of device {self.device} recorded on a stream of {target.device_id}"
            )
        if target.capture is not None:
            target.capture.record(self, target)
            return
        self.capture = None
        self.recorded += 1
        target.enqueue(("record", self, self.recorded))

    def synchronize(self) -> None:
        if self.capture is not None:
            self.capture.fail("synchronize on an event of the capture")
            raise CUDARuntimeError(900, "cudaErrorStreamCaptureUnsupported")
        self.sim.host_waits += 1
        goal = self.recorded
        self.sim.run_until(lambda: self.completed >= goal)

    @property
    def done(self) -> bool:
        """``cudaEventQuery``: whether the latest record has run (True if never recorded).
        The device works while the host asks: a few ready operations run first."""
        if self.capture is not None:
            self.capture.fail("query of an event of the capture")
            raise CUDARuntimeError(900, "cudaErrorStreamCaptureUnsupported")
        self.sim.queries += 1
        self.sim.progress()
        return self.completed >= self.recorded


class FakeCapture:
    """One stream capture: per captured stream, its operations in order.  Events recorded
    in it count their own occurrences, so a replay can give every wait the record it saw."""

    def __init__(self, sim: FakeCuda, origin: FakeStream):
        self.sim, self.origin = sim, origin
        self.streams = [origin]
        self.ops: dict[FakeStream, list] = {origin: []}
        self.occurrences: dict[FakeEvent, int] = {}
        self.invalid: str | None = None

    def add(self, stream: FakeStream, op) -> None:
        self.ops[stream].append(op)

    def join(self, stream: FakeStream) -> None:
        stream.capture = self
        self.streams.append(stream)
        self.ops[stream] = []

    def record(self, event: FakeEvent, stream: FakeStream) -> None:
        self.occurrences[event] = self.occurrences.get(event, 0) + 1
        event.capture = self
        self.add(stream, ("record", event, self.occurrences[event]))

    def fail(self, why: str) -> None:
        self.invalid = self.invalid or why

    def close(self) -> None:
        for stream in self.streams:
            stream.capture = None
        for event in self.occurrences:
            event.capture = None

    def unjoined(self) -> list[int]:
        """Streams whose last operation the origin does not wait for."""
        waited = {(op[1], op[2]) for op in self.ops[self.origin] if op[0] == "wait"}
        bad = []
        for stream in self.streams[1:]:
            last = self.ops[stream][-1] if self.ops[stream] else None
            if last is None or last[0] != "record" or (last[1], last[2]) not in waited:
                bad.append(stream.ptr)
        return bad


class FakeGraph:
    """A captured graph: each launch runs the captured operations again on fresh internal
    streams, ordered by the captured waits only, after the work already queued on the
    launching stream; later work on that stream waits for all of it."""

    def __init__(self, sim: FakeCuda, capture: FakeCapture):
        self.sim, self.capture = sim, capture

    def launch(self, stream=None) -> None:
        sim, capture = self.sim, self.capture
        if stream is None:
            stream = sim.module.cuda.get_current_stream()
        stream = sim.stream_by_ptr(stream.ptr) if stream.ptr == 0 else stream
        clones = {}
        for event, count in capture.occurrences.items():
            clone = FakeEvent(sim, event.device, timing=False)
            clone.recorded = count
            clones[event] = clone
        start = FakeEvent(sim, stream.device_id, timing=False)
        start.record(stream)
        internal = {}
        for captured in capture.streams:
            copy = FakeStream(sim, captured.device_id, ptr=next(sim._stream_ids))
            internal[captured] = copy
            sim._graph_streams.append(copy)
        internal[capture.origin].queue.append(("wait", start, start.recorded))
        for captured in capture.streams:
            for op in capture.ops[captured]:
                if op[0] in ("record", "wait"):
                    op = (op[0], clones[op[1]], op[2])
                internal[captured].queue.append(op)
        end = FakeEvent(sim, stream.device_id, timing=False)
        end.recorded = 1
        internal[capture.origin].queue.append(("record", end, 1))
        stream.enqueue(("wait", end, 1))
        sim.graph_launches += 1


class FakeArray:
    """A one-dimensional, contiguous device array in the simulated address space."""

    def __init__(self, sim: FakeCuda, ptr: int, count: int, dtype):
        self.sim = sim
        self.dtype = np.dtype(dtype)
        self.shape = (count,)
        self.size = count
        self.ndim = 1
        self.nbytes = count * self.dtype.itemsize
        self.flags = types.SimpleNamespace(c_contiguous=True)
        self.data = types.SimpleNamespace(ptr=ptr)
        _, device = sim.resolve(ptr, self.nbytes)
        self.device = types.SimpleNamespace(id=device)

    def host(self) -> np.ndarray:
        view, _ = self.sim.resolve(self.data.ptr, self.nbytes)
        return view.view(self.dtype)

    def reshape(self, *shape):
        if shape not in ((-1,), ((-1,),), (self.size,)):
            raise TypeError("the simulator only has one-dimensional arrays")
        return self

    def __setitem__(self, item, value) -> None:
        """``out[...] = src``: CuPy's elementwise copy, queued on the current stream of
        the current device, where ``out`` must live; ``src`` may live on a peer the
        current device has peer access to."""
        sim = self.sim
        if item is not Ellipsis and item != slice(None):
            raise TypeError("the simulator only assigns whole arrays")
        if not isinstance(value, FakeArray) or value.size != self.size:
            raise TypeError("the simulator only copies an array of as many elements")
        if self.device.id != sim.current:
            raise ValueError(
                f"array on device {self.device.id} used on current device {sim.current}"
            )
        where = value.device.id
        if where != sim.current and (sim.current, where) not in sim.peer_enabled:
            raise ValueError(f"no peer access from device {sim.current} to {where}")
        stream = sim.current_streams.get(sim.current) or sim.legacy_stream(sim.current)
        out, src = self.host(), value.host()
        stream.enqueue(
            ("run", lambda: np.copyto(out, src.astype(out.dtype)), ("copy", self.data.ptr,
             value.data.ptr, self.nbytes))
        )  # fmt: skip

    def __getitem__(self, item):
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("the simulator only slices contiguous ranges")
        start, stop, _ = item.indices(self.size)
        stop = max(start, stop)
        return type(self)(
            self.sim, self.data.ptr + start * self.dtype.itemsize, stop - start, self.dtype
        )


class FakeUfunc:
    """An elementwise kernel: queued on the current stream of the current device."""

    def __init__(self, sim: FakeCuda, ufunc: np.ufunc):
        self.sim = sim
        self.ufunc = ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, x, y, out):
        sim = self.sim
        for array in (x, y, out):
            if not isinstance(array, FakeArray):
                continue  # a scalar operand
            if array.device.id != sim.current:
                raise ValueError(
                    f"array on device {array.device.id} used on current device {sim.current}"
                )
        stream = sim.current_streams.get(sim.current) or sim.legacy_stream(sim.current)
        xv, ov = x.host(), out.host()
        yv = y.host() if isinstance(y, FakeArray) else y
        ufunc = self.ufunc

        def kernel():
            with np.errstate(all="ignore"):
                ufunc(xv, yv, out=ov)

        stream.enqueue(("run", kernel, ("kernel", out.data.ptr, out.size)))
        return out


# What ring.ops.divide_by_nodes calls to finish avg on CuPy arrays.
_AVG_UFUNCS = ("divide", "fmod", "subtract", "floor_divide")

# What each op of ring.gpu.kernels' source computes (a test may break one on purpose).
RAW_KERNEL_OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class FakeRawKernel:
    """``ring.gpu.kernels``' kernel, as the device would run it: what it computes is
    ``dst[:n] = op(dst[:n], src[:n])``; what the simulator checks is what would fault
    on a GPU (a 16-byte vector access at an address not aligned to 16 bytes, an access
    outside an array, a launch with no threads) and that the (head, vectors) the host
    passes add up to no more than ``n``."""

    def __init__(self, sim: FakeCuda, code: str, name: str):
        match = re.fullmatch(r"ring_reduce_(sum|prod|max|min)_(\w+)", name)
        if match is None or f"void {name}(" not in code:
            raise CUDARuntimeError(500, f"cudaErrorNotFound: no kernel {name!r} in the source")
        self.sim, self.name = sim, name
        self.ufunc, self.dtype = RAW_KERNEL_OPS[match.group(1)], np.dtype(match.group(2))

    def __call__(self, grid, block, args, *, shared_mem=0):
        sim = self.sim
        dst, src, n, head, nvec = args
        n, head, nvec = int(n), int(head), int(nvec)
        if grid[0] < 1 or block[0] < 1:
            raise CUDARuntimeError(9, "cudaErrorInvalidConfiguration")
        for array in (dst, src):
            if array.device.id != sim.current or array.dtype != self.dtype:
                raise ValueError(f"{self.name}: an argument on another device or of another dtype")
            if n > array.size:
                raise CUDARuntimeError(700, "cudaErrorIllegalAddress: n beyond an array")
        width = 16 // self.dtype.itemsize
        if head + nvec * width > n or min(head, nvec) < 0:
            raise CUDARuntimeError(700, "cudaErrorIllegalAddress: head and vectors beyond n")
        if nvec and any((a.data.ptr + head * self.dtype.itemsize) % 16 for a in (dst, src)):
            raise CUDARuntimeError(716, "cudaErrorMisalignedAddress")
        sim.launches.append((self.name, tuple(grid), tuple(block)))
        stream = sim.current_streams.get(sim.current) or sim.legacy_stream(sim.current)
        xv, yv, ufunc = dst.host()[:n], src.host()[:n], self.ufunc

        def kernel():
            with np.errstate(all="ignore"):
                ufunc(xv, yv, out=xv)

        stream.enqueue(("run", kernel, ("kernel", dst.data.ptr, n)))


@contextlib.contextmanager
def fake_cupy(sim: FakeCuda):
    """Install ``sim``'s module as ``cupy`` for the duration of the block."""
    names = ("cupy", "cupy.cuda", "cupy.cuda.runtime", "cupy.cuda.nccl")
    absent = object()
    saved = {name: sys.modules.get(name, absent) for name in names}
    sys.modules["cupy"] = sim.module
    sys.modules["cupy.cuda"] = sim.module.cuda
    sys.modules["cupy.cuda.runtime"] = sim.module.cuda.runtime
    sys.modules["cupy.cuda.nccl"] = sim.module.cuda.nccl
    try:
        yield sim.module
    finally:
        for name, module in saved.items():
            if module is absent:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module  # None too: "import cupy" keeps failing
