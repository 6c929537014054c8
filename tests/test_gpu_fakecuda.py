"""A CPU stand-in for the slice of CuPy and the CUDA runtime that ``ring.gpu`` uses.

It lets the GPU backend's own code run here, without a GPU, under CUDA's ordering rules
and nothing more: every stream is a queue; an op runs only when it reaches the head of
its queue, and a ``wait_event`` only once the record it captured (the event's latest
record when the wait was *enqueued*) has run.  No stream waits for the legacy default
stream (the backend's streams are non-blocking).  Work runs lazily, when the host
synchronises, and the order in which ready streams advance is drawn at random (in
bursts, so one stream can run far ahead), so a missing dependency shows up as a wrong
result.  Memory is one flat address space of NumPy bytes, each allocation tagged with its
device, and the runtime calls check what CUDA would: a kernel or event record on a
stream of another device than the current one fails, a peer copy is given the devices
its pointers live on.

The tests at the bottom check the simulator itself: that it really reorders work and
catches a missing wait, and that its call signatures match the installed CuPy's.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import re
import sys
import types
import warnings
from collections import deque

import numpy as np
import pytest

__all__ = ["FakeCuda", "fake_cupy"]


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int, message: str = ""):
        self.status = status
        super().__init__(f"CUDA error {status}: {message}")


class FakeCuda:
    """One simulated machine with ``devices`` CUDA devices (0 = CuPy sees none)."""

    def __init__(
        self,
        devices: int = 1,
        *,
        seed: int = 0,
        peer=None,
        drop_waits=False,
        drop_wait=None,
        priority=False,
        ensure=True,
        capture_fails=None,
        l2_bytes=6 << 20,
    ):
        self.device_count = devices
        self.l2_bytes = l2_bytes  # what getDeviceProperties reports as l2CacheSize
        # capture_fails: "begin" or "end" makes that capture call fail, as a driver or
        # CuPy without (multi-device) graph capture would
        self.capture_fails = capture_fails
        self.graph_launches = 0
        self._graph_streams: list = []
        # ensure: offer CuPy's private _deviceEnsurePeerAccess, as current CuPy does
        self.ensure = ensure
        self.rng = np.random.default_rng(seed)
        # peer(a, b) -> whether device a can access device b's memory
        self.peer = peer or (lambda a, b: True)
        self.peer_enabled: set[tuple[int, int]] = set()
        # True: every wait_event is ignored (a broken backend, for the self-tests)
        self.drop_waits = drop_waits
        # drop_wait: the index (in self.waits) of the one wait_event to ignore
        self.drop_wait = drop_wait
        # priority: an adversary instead of random bursts: every stream gets a random rank
        # and the ready stream of the highest rank always runs first, so a stream can be
        # starved for as long as anything else is ready
        self.priority = priority
        # trace: a list to log (stream, op) of everything enqueued outside captures
        self.trace: list | None = None
        self.current = 0
        self.clock = 0
        self.host_waits = 0
        self.waits: list[tuple] = []  # (stream, event) of every wait_event, in order
        self._blocks: list[tuple[int, np.ndarray, int]] = []  # (base, bytes, device)
        self._next_address = 1 << 20
        self._streams: dict[int, FakeStream] = {}
        self._stream_ids = itertools.count(16)
        self._legacy = {}
        self.module = self._build_module()

    # -- memory ------------------------------------------------------------------------

    def alloc(self, nbytes: int, device: int) -> int:
        base = self._next_address
        # Poison: a read of memory nothing wrote gives garbage, not zeros.
        block = self.rng.integers(0, 256, size=max(nbytes, 1), dtype=np.uint8)
        self._blocks.append((base, block, device))
        self._next_address += -(-max(nbytes, 1) // 256) * 256 + 256
        return base

    def resolve(self, ptr: int, nbytes: int) -> tuple[np.ndarray, int]:
        for base, block, device in self._blocks:
            if base <= ptr and ptr + nbytes <= base + block.size:
                return block[ptr - base : ptr - base + nbytes], device
        raise CUDARuntimeError(1, f"invalid device pointer {ptr:#x} (+{nbytes})")

    # -- streams and the scheduler -----------------------------------------------------

    def legacy_stream(self, device: int) -> FakeStream:
        if device not in self._legacy:
            self._legacy[device] = FakeStream(self, device, ptr=0)
        return self._legacy[device]

    def stream_by_ptr(self, ptr: int) -> FakeStream:
        if ptr == 0:
            return self.legacy_stream(self.current)
        return self._streams[ptr]

    def _queues(self):
        self._graph_streams = [s for s in self._graph_streams if s.queue]
        return [*self._streams.values(), *self._legacy.values(), *self._graph_streams]

    def _ready(self, stream: FakeStream) -> bool:
        if not stream.queue:
            return False
        kind, payload = stream.queue[0][0], stream.queue[0][1:]
        if kind == "wait":
            event, record = payload
            return event.completed >= record
        if kind == "gang":
            # a collective kernel: runs once every participating stream has reached it
            gang = payload[0]
            return all(s.queue and s.queue[0][1] is gang for s in gang.streams)
        return True

    def run_until(self, done) -> None:
        """Advance random ready streams (in random bursts) until ``done()`` holds."""
        last = None
        while not done():
            ready = [s for s in self._queues() if self._ready(s)]
            if not ready:
                raise AssertionError("deadlock: the host waits for work that can never run")
            if self.priority:
                stream = max(ready, key=lambda s: s.rank)
            elif last in ready and self.rng.random() < 0.7:
                stream = last
            else:
                stream = ready[self.rng.integers(len(ready))]
            self._execute(stream)
            last = stream

    def _execute(self, stream: FakeStream) -> None:
        op = stream.queue.popleft()
        self.clock += 1
        if op[0] == "record":
            event, record = op[1], op[2]
            event.completed = max(event.completed, record)
            event.time = self.clock
        elif op[0] == "run":
            op[1]()
        elif op[0] == "gang":
            gang = op[1]
            for other in gang.streams:
                if other is not stream:
                    other.queue.popleft()
            gang.run()

    def drain(self) -> None:
        self.run_until(lambda: not any(s.queue for s in self._queues()))

    def check_device(self, device: int) -> None:
        if not 0 <= device < self.device_count:
            raise CUDARuntimeError(101, f"invalid device ordinal {device}")

    # -- the module ----------------------------------------------------------------------

    def _build_module(self) -> types.ModuleType:
        sim = self
        cupy = types.ModuleType("cupy")
        cupy.__fake__ = True
        cuda = types.ModuleType("cupy.cuda")
        runtime = types.ModuleType("cupy.cuda.runtime")
        cupy.cuda = cuda
        cuda.runtime = runtime

        runtime.CUDARuntimeError = CUDARuntimeError
        runtime.memcpyDeviceToDevice = 3

        def getDeviceCount():
            if sim.device_count == 0:
                raise CUDARuntimeError(100, "cudaErrorNoDevice: no CUDA-capable device")
            return sim.device_count

        def getDevice():
            return sim.current

        def setDevice(device):
            sim.check_device(device)
            sim.current = device

        def deviceCanAccessPeer(device, peerDevice):
            sim.check_device(device)
            sim.check_device(peerDevice)
            return int(device != peerDevice and sim.peer(device, peerDevice))

        def deviceEnablePeerAccess(peerDevice):
            pair = (sim.current, peerDevice)
            if pair in sim.peer_enabled:
                raise CUDARuntimeError(704, "cudaErrorPeerAccessAlreadyEnabled")
            if not deviceCanAccessPeer(*pair):
                raise CUDARuntimeError(217, "cudaErrorPeerAccessUnsupported")
            sim.peer_enabled.add(pair)

        def memcpyPeerAsync(dst, dstDevice, src, srcDevice, size, stream):
            dst_view, dst_dev = sim.resolve(dst, size)
            src_view, src_dev = sim.resolve(src, size)
            if (dst_dev, src_dev) != (dstDevice, srcDevice):
                raise CUDARuntimeError(
                    1, f"peer copy names devices {srcDevice}->{dstDevice}, memory is "
                    f"on {src_dev}->{dst_dev}"
                )  # fmt: skip
            sim.stream_by_ptr(stream).enqueue(
                ("run", lambda: np.copyto(dst_view, src_view), ("copy", dst, src, size))
            )

        def memcpyAsync(dst, src, size, kind, stream):
            if kind != runtime.memcpyDeviceToDevice:
                raise CUDARuntimeError(1, f"memcpy kind {kind} is not simulated")
            dst_view, _ = sim.resolve(dst, size)
            src_view, _ = sim.resolve(src, size)
            sim.stream_by_ptr(stream).enqueue(
                ("run", lambda: np.copyto(dst_view, src_view), ("copy", dst, src, size))
            )

        def memGetInfo():
            return 64 << 30, 80 << 30

        def getDeviceProperties(device):
            sim.check_device(device)
            return {
                "name": b"Simulated GPU",
                "totalGlobalMem": 80 << 30,
                "multiProcessorCount": 4,
                "l2CacheSize": sim.l2_bytes,
            }

        for f in (getDeviceCount, getDevice, setDevice, deviceCanAccessPeer, memGetInfo):
            setattr(runtime, f.__name__, f)
        runtime.getDeviceProperties = getDeviceProperties
        runtime.deviceEnablePeerAccess = deviceEnablePeerAccess
        if self.ensure:

            def _deviceEnsurePeerAccess(peerDevice):
                with contextlib.suppress(CUDARuntimeError):
                    deviceEnablePeerAccess(peerDevice)
                if (sim.current, peerDevice) not in sim.peer_enabled:
                    raise CUDARuntimeError(217, "cudaErrorPeerAccessUnsupported")

            runtime._deviceEnsurePeerAccess = _deviceEnsurePeerAccess
        runtime.memcpyPeerAsync = memcpyPeerAsync
        runtime.memcpyAsync = memcpyAsync

        class Device:
            def __init__(self, device=None):
                self.id = sim.current if device is None else int(device)
                self._stack = []

            def __enter__(self):
                self._stack.append(sim.current)
                setDevice(self.id)
                return self

            def __exit__(self, *exc):
                sim.current = self._stack.pop()

            def synchronize(self):
                sim.host_waits += 1
                sim.run_until(
                    lambda: not any(q.queue for q in sim._queues() if q.device_id in (self.id, -1))
                )

        class Stream(FakeStream):
            def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
                super().__init__(sim, sim.current, ptr=next(sim._stream_ids))
                sim._streams[self.ptr] = self

        class Event(FakeEvent):
            def __init__(self, block=False, disable_timing=False, interprocess=False):
                super().__init__(sim, sim.current, timing=not disable_timing)

        def get_current_stream(device_id=-1):
            # Like cupy.cuda.Stream.null: ptr 0, device -1 (the current device's).
            return sim.current_streams.get(device_id if device_id >= 0 else sim.current) or (
                NullStream(sim)
            )

        def get_elapsed_time(start_event, end_event):
            for event in (start_event, end_event):
                if not event.timing:
                    raise CUDARuntimeError(600, "cudaErrorInvalidResourceHandle (no timing)")
                if event.completed < event.recorded or event.time is None:
                    raise CUDARuntimeError(600, "cudaErrorNotReady")
            return float(end_event.time - start_event.time) * 1e-3

        sim.current_streams = {}
        cuda.Device = Device
        cuda.Stream = Stream
        cuda.Event = Event
        cuda.get_current_stream = get_current_stream
        cuda.get_elapsed_time = get_elapsed_time

        class ndarray(FakeArray):
            pass

        sim.ndarray = ndarray
        cupy.ndarray = ndarray

        def empty(shape, dtype=np.float64):
            count = int(shape if np.isscalar(shape) else shape[0])
            dtype = np.dtype(dtype)
            return ndarray(sim, sim.alloc(count * dtype.itemsize, sim.current), count, dtype)

        cupy.empty = empty

        def empty_like(array):
            return empty(array.size, array.dtype)

        def zeros_like(array):
            return sim.to_device(np.zeros(array.size, array.dtype), sim.current)

        def ones(shape, dtype=np.float64):
            return sim.to_device(np.ones(int(shape), dtype=dtype), sim.current)

        def asarray(values):
            return sim.to_device(np.asarray(values), sim.current)

        def asnumpy(array):
            # a copy on the legacy stream, which the host waits for
            legacy = sim.legacy_stream(array.device.id)
            sim.run_until(lambda: not legacy.queue)
            return sim.to_host(array)

        pool = types.SimpleNamespace(free_all_blocks=lambda stream=None: None)
        cupy.empty_like = empty_like
        cupy.zeros_like = zeros_like
        cupy.__version__ = "simulated"
        cupy.ones = ones
        cupy.asarray = asarray
        cupy.asnumpy = asnumpy
        cupy.get_default_memory_pool = lambda: pool
        cuda.nccl = self._build_nccl()
        for name in ("add", "multiply", "maximum", "minimum", *_AVG_UFUNCS):
            setattr(cupy, name, FakeUfunc(sim, getattr(np, name)))
        cupy.RawKernel = lambda code, name, options=(), **kw: FakeRawKernel(sim, code, name)
        sim.launches = []  # (kernel name, grid, block) of every RawKernel launch
        return cupy

    def _build_nccl(self) -> types.ModuleType:
        """``cupy.cuda.nccl``: allReduce queues one collective kernel per device stream,
        which runs only once every rank's stream has reached it."""
        sim = self
        nccl = types.ModuleType("cupy.cuda.nccl")
        nccl.available = True
        ops = {"NCCL_SUM": np.add, "NCCL_PROD": np.multiply}
        ops |= {"NCCL_MAX": np.maximum, "NCCL_MIN": np.minimum}
        for i, name in enumerate(ops):
            setattr(nccl, name, i)
        ufuncs = list(ops.values())
        for name in ("int8", "uint8", "int32", "uint32", "int64", "uint64"):
            setattr(nccl, f"NCCL_{name.upper()}", name)
        for name in ("float16", "float32", "float64"):
            setattr(nccl, f"NCCL_{name.upper()}", name)
        group: list = []
        nccl.group_depth = 0

        class Gang:
            def __init__(self, calls):
                self.calls = calls
                self.streams = [call[0] for call in calls]

            def run(self):
                views = [view for _, view, _, _ in self.calls]
                total = views[0].copy()
                ufunc = ufuncs[self.calls[0][2]]
                for view in views[1:]:
                    ufunc(total, view, out=total)
                for view in views:
                    view[:] = total

        class NcclCommunicator:
            def __init__(self, device, rank, size):
                self.device, self.rank, self.size = device, rank, size

            @staticmethod
            def initAll(devices):
                if len(set(devices)) < len(devices):
                    raise RuntimeError("NCCL error: invalid usage (duplicate GPU)")
                return [NcclCommunicator(d, r, len(devices)) for r, d in enumerate(devices)]

            def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
                if nccl.group_depth == 0:
                    raise RuntimeError("the simulator only runs allReduce inside a group")
                if sendbuf != recvbuf:
                    raise RuntimeError("the simulator only runs allReduce in place")
                itemsize = np.dtype(datatype).itemsize
                raw, device = sim.resolve(recvbuf, count * itemsize)
                if device != self.device:
                    raise CUDARuntimeError(1, "buffer on another device than the rank's")
                target = sim.stream_by_ptr(stream)
                if target.device_id != self.device:
                    raise CUDARuntimeError(1, "stream on another device than the rank's")
                group.append((target, raw.view(datatype), op, self.rank))

            def destroy(self):
                pass

        def groupStart():
            nccl.group_depth += 1

        def groupEnd():
            nccl.group_depth -= 1
            if nccl.group_depth == 0 and group:
                gang = Gang(sorted(group, key=lambda call: call[3]))
                group.clear()
                for stream in gang.streams:
                    stream.enqueue(("gang", gang))

        nccl.NcclCommunicator = NcclCommunicator
        nccl.groupStart = groupStart
        nccl.groupEnd = groupEnd
        nccl.get_version = lambda: 22000
        return nccl

    # -- helpers for tests ---------------------------------------------------------------

    def to_device(self, host: np.ndarray, device: int) -> FakeArray:
        host = np.ascontiguousarray(host)
        ptr = self.alloc(host.nbytes, device)
        view, _ = self.resolve(ptr, host.nbytes)
        view[:] = host.view(np.uint8).reshape(-1)
        return self.ndarray(self, ptr, host.shape[0], host.dtype)

    def to_host(self, array: FakeArray) -> np.ndarray:
        """The array's bytes *now*, without running queued work."""
        return array.host().copy()


class NullStream:
    ptr = 0
    device_id = -1

    def __init__(self, sim):
        self.sim = sim


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

# What each op of ring.gpu_kernels' source computes (a test may break one on purpose).
RAW_KERNEL_OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class FakeRawKernel:
    """``ring.gpu_kernels``' kernel, as the device would run it: what it computes is
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


# -- the simulator's own tests ---------------------------------------------------------------


def test_simulator_runs_streams_out_of_program_order():
    """Two independent streams: some seed runs the later-enqueued one first."""
    orders = set()
    for seed in range(20):
        sim = FakeCuda(1, seed=seed)
        with fake_cupy(sim) as cp:
            a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
            seen = []
            a.enqueue(("run", lambda seen=seen: seen.append("a")))
            b.enqueue(("run", lambda seen=seen: seen.append("b")))
            sim.drain()
            orders.add(tuple(seen))
    assert orders == {("a", "b"), ("b", "a")}


def test_simulator_honours_waits_and_catches_their_absence():
    def run(drop_waits: bool, seed: int) -> list:
        sim = FakeCuda(1, seed=seed, drop_waits=drop_waits)
        with fake_cupy(sim) as cp:
            producer, consumer = (cp.cuda.Stream(non_blocking=True) for _ in range(2))
            event = cp.cuda.Event(disable_timing=True)
            seen = []
            producer.enqueue(("run", lambda: seen.append("write")))
            event.record(producer)
            consumer.wait_event(event)
            consumer.enqueue(("run", lambda: seen.append("read")))
            consumer.synchronize()
            sim.drain()
            return seen

    assert all(run(False, seed) == ["write", "read"] for seed in range(30))
    assert any(run(True, seed) == ["read", "write"] for seed in range(30))


def test_simulator_drops_one_chosen_wait_and_can_starve_a_stream():
    def run(seed: int, drop_wait=None, drop_waits=False, priority=False) -> tuple:
        sim = FakeCuda(1, seed=seed, drop_wait=drop_wait, drop_waits=drop_waits, priority=priority)
        with fake_cupy(sim) as cp:
            producer, consumer = (cp.cuda.Stream(non_blocking=True) for _ in range(2))
            first, second = (cp.cuda.Event(disable_timing=True) for _ in range(2))
            seen: list = []
            producer.enqueue(("run", lambda: seen.append("write")))
            first.record(producer)
            second.record(producer)
            consumer.wait_event(first)
            consumer.wait_event(second)
            consumer.enqueue(("run", lambda: seen.append("read")))
            sim.drain()
            return tuple(seen)

    # One wait dropped, the other still orders them.
    assert {run(seed, drop_wait=0) for seed in range(20)} == {("write", "read")}
    # Without waits the adversary runs the higher-ranked stream to the end first: both
    # orders occur, each seed always gives the same one.
    orders = [run(seed, drop_waits=True, priority=True) for seed in range(20)]
    assert set(orders) == {("write", "read"), ("read", "write")}
    assert orders == [run(seed, drop_waits=True, priority=True) for seed in range(20)]
    assert {run(seed, priority=True) for seed in range(20)} == {("write", "read")}


def test_simulator_refuses_what_cuda_refuses():
    sim = FakeCuda(2)
    with fake_cupy(sim) as cp:
        with cp.cuda.Device(1):
            stream = cp.cuda.Stream(non_blocking=True)
        event = cp.cuda.Event()  # on device 0
        with pytest.raises(CUDARuntimeError):
            event.record(stream)
        with pytest.raises(RuntimeError, match="does not match"), stream:
            pass
        x = sim.to_device(np.ones(4, np.float32), 1)
        with pytest.raises(ValueError, match="current device"):
            cp.add(x, x, out=x)
        y = sim.to_device(np.ones(4, np.float32), 0)
        with pytest.raises(CUDARuntimeError, match="names devices"):
            cp.cuda.runtime.memcpyPeerAsync(y.data.ptr, 1, x.data.ptr, 0, 16, 0)


def _parameters(function) -> list[str]:
    """Parameter names from the signature Python sees, else from the docstring."""
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return _signature_from_doc(function)
    return [n for n in names if n != "self"]


def _signature_from_doc(function) -> list[str]:
    """Parameter names from a Cython docstring's first line, e.g.
    ``memcpyPeerAsync(intptr_t dst, int dstDevice, ...)``."""
    first = (function.__doc__ or "").strip().splitlines()[0]
    inside = re.match(r"^[\w.]+\((.*)\)", first).group(1)
    names = []
    for part in filter(None, (p.strip() for p in inside.split(","))):
        part = part.split("=")[0].strip()
        names.append(part.split()[-1].lstrip("*"))
    return [n for n in names if n != "self"]


def test_simulated_calls_match_the_installed_cupy():
    """Every CuPy entry point ring.gpu calls exists in the real CuPy with the parameters the
    simulator accepts (checked from CuPy's own signatures; skipped without CuPy)."""
    real = pytest.importorskip("cupy")
    if getattr(real, "__fake__", False):
        pytest.skip("cupy is the simulator here")
    sim = FakeCuda(1).module
    runtime_calls = [
        "getDeviceCount",
        "getDevice",
        "setDevice",
        "deviceCanAccessPeer",
        "deviceEnablePeerAccess",
        "memcpyPeerAsync",
        "memcpyAsync",
    ]
    for name in runtime_calls:
        real_params = _signature_from_doc(getattr(real.cuda.runtime, name))
        fake_params = list(inspect.signature(getattr(sim.cuda.runtime, name)).parameters)
        assert real_params == fake_params, name
    assert real.cuda.runtime.memcpyDeviceToDevice == sim.cuda.runtime.memcpyDeviceToDevice
    ensure = getattr(real.cuda.runtime, "_deviceEnsurePeerAccess", None)
    if ensure is not None:  # private in CuPy; ring.gpu falls back when it is gone
        fake = sim.cuda.runtime._deviceEnsurePeerAccess
        assert _signature_from_doc(ensure) == list(inspect.signature(fake).parameters)
    assert issubclass(real.cuda.runtime.CUDARuntimeError, RuntimeError)
    assert real.cuda.runtime.CUDARuntimeError(704).status == 704
    for cls, names in (
        (real.cuda.Stream, ["wait_event", "synchronize", "__enter__", "__exit__"]),
        (real.cuda.Stream, ["begin_capture", "end_capture", "is_capturing"]),
        (real.cuda.Event, ["record", "synchronize"]),
        (real.cuda.Graph, ["launch"]),
        (real.RawKernel, ["__call__"]),
    ):
        for name in names:
            assert callable(getattr(cls, name)), (cls, name)
    stream_params = inspect.signature(real.cuda.Stream).parameters
    assert "non_blocking" in stream_params
    assert "disable_timing" in inspect.signature(real.cuda.Event).parameters
    assert _signature_from_doc(real.cuda.get_current_stream) == ["device_id"]
    assert _signature_from_doc(real.cuda.get_elapsed_time) == ["start_event", "end_event"]
    for name in ("add", "multiply", "maximum", "minimum", *_AVG_UFUNCS):
        assert isinstance(getattr(real, name), real.ufunc), name
    assert _parameters(real.cuda.Stream.begin_capture) == ["mode"]
    assert _parameters(real.cuda.Graph.launch) == ["stream"]
    assert {"multiProcessorCount", "l2CacheSize"} <= set(real.cuda.runtime.getDeviceProperties(0))


def test_simulated_nccl_matches_the_installed_one():
    """The NCCL calls of the nccl backend exist with these parameters (needs CuPy with NCCL)."""
    real = pytest.importorskip("cupy")
    if getattr(real, "__fake__", False):
        pytest.skip("cupy is the simulator here")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cupy.cuda import nccl
    if not getattr(nccl, "available", False):
        pytest.skip("CuPy cannot load NCCL here")
    fake = FakeCuda(1).module.cuda.nccl
    for name in ("allReduce", "destroy"):
        real_params = _signature_from_doc(getattr(nccl.NcclCommunicator, name))
        fake_params = list(inspect.signature(getattr(fake.NcclCommunicator, name)).parameters)
        assert real_params == fake_params[1:], name  # the fake's list starts with self
    assert _signature_from_doc(nccl.NcclCommunicator.initAll) == ["devices"]
    for name in dir(fake):
        if name.startswith("NCCL_"):
            assert hasattr(nccl, name), name
    assert callable(nccl.groupStart) and callable(nccl.groupEnd) and callable(nccl.get_version)
