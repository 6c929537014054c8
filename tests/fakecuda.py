"""A CPU stand-in for the slice of CuPy and the CUDA runtime that ``ring.gpu`` uses.

It lets the GPU backend's own code run here, without a GPU, under CUDA's ordering rules
and nothing more: every stream is a queue; an op runs only when it reaches the head of
its queue, and a ``wait_event`` only once the record it captured (the event's latest
record when the wait was *enqueued*) has run.  No stream waits for the legacy default
stream (the backend's streams are non-blocking).  Work runs lazily, when the host
synchronises (and a few operations at a time while it queries an event), and the order
in which ready streams advance is drawn at random (in bursts, so one stream can run far
ahead), so a missing dependency shows up as a wrong result.  Memory is one flat address
space of NumPy bytes, each allocation tagged with its device, and the runtime calls check
what CUDA would: a kernel or event record on a stream of another device than the current
one fails, a peer copy is given the devices its pointers live on.

``FakeCuda`` is the machine and the runtime; its streams, events, graphs, arrays and
kernels are in ``fakecuda_parts``.  ``test_gpu_fakecuda.py`` tests the simulator itself.
"""

from __future__ import annotations

import contextlib
import itertools
import types

import numpy as np
from fakecuda_parts import (
    _AVG_UFUNCS,
    RAW_KERNEL_OPS,
    CUDARuntimeError,
    FakeArray,
    FakeEvent,
    FakeRawKernel,
    FakeStream,
    FakeUfunc,
    NullStream,
    fake_cupy,
)

__all__ = ["RAW_KERNEL_OPS", "CUDARuntimeError", "FakeCuda", "FakeUfunc", "fake_cupy"]


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
        self.queries = 0  # event queries (cudaEventQuery), which never block
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

    def progress(self) -> None:
        """What the device does while the host is busy elsewhere: a few random ready
        operations (none, at times)."""
        for _ in range(int(self.rng.integers(0, 5))):
            ready = [s for s in self._queues() if self._ready(s)]
            if not ready:
                return
            self._execute(ready[self.rng.integers(len(ready))])

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
                # Out of place (send != recv) as in place: the sends reduced, into the recvs.
                sends = [send for _, send, _, _, _ in self.calls]
                total = sends[0].copy()
                ufunc = ufuncs[self.calls[0][2]]
                for send in sends[1:]:
                    ufunc(total, send, out=total)
                for _, _, _, _, recv in self.calls:
                    recv[:] = total

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
                itemsize = np.dtype(datatype).itemsize
                raw, device = sim.resolve(recvbuf, count * itemsize)
                sent, send_device = sim.resolve(sendbuf, count * itemsize)
                if device != self.device or send_device != self.device:
                    raise CUDARuntimeError(1, "buffer on another device than the rank's")
                target = sim.stream_by_ptr(stream)
                if target.device_id != self.device:
                    raise CUDARuntimeError(1, "stream on another device than the rank's")
                send, recv = sent.view(datatype), raw.view(datatype)
                group.append((target, send, op, self.rank, recv))

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
