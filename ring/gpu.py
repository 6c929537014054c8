"""The CuPy backend: one CUDA device per logical node, as the original study's ``gpu/``.

Node ``i`` runs on device ``devices[i]`` and owns a buffer resident there.  The host only
*enqueues*; the ring runs on the devices:

* **Links.** Node ``i`` pulls each chunk from node ``i - 1`` on its own stream.  Between
  two devices that is ``cudaMemcpyPeerAsync`` into a per-node scratch chunk (direct over
  NVLink/PCIe where peer access is enabled, staged by the driver where it is not); all-gather
  copies straight into place.  When both nodes share one device (``shared_devices=True``)
  there is no link to cross: all-gather is an ordinary device-to-device copy, and
  reduce-scatter's kernel reads the neighbour's chunk where it lies instead of first copying
  it into scratch, which would move every reduced byte through memory twice more.
  ``force_peer_copies=True`` treats such a pair like two GPUs instead (peer copy into
  scratch, then the kernel), as the original study's single-GPU trick did; on one GPU that
  runs exactly the code path of a multi-GPU ring.
* **Reduction.** Right after a chunk lands, one kernel on the receiving node's stream
  reduces it into the node's own chunk (:mod:`ring.gpu_kernels`: ours, with 16-byte vector
  accesses, or CuPy's ufunc for what ours does not cover); no host round trip.
* **Synchronisation.** A stream per node and an event per node per step.  Step ``t`` on
  node ``i`` waits (``cudaStreamWaitEvent``) only on node ``i - 1``'s event from step
  ``t - 1``, exactly the dependency the schedule has.  That wait also covers the
  write-after-read hazard: stream order makes node ``i``'s step ``t`` wait transitively for
  node ``i + 1``'s step ``t - (N - 1)``, the last one that reads what node ``i``
  overwrites at ``t`` (see :mod:`ring.cpu`).  The scratch chunk is written and read only
  on its own node's stream, so reusing it every step is ordered by the stream itself.
  Every call starts after the work already queued on the caller's current stream of each
  device, and the host waits once, at the end, on a single event.
* **Graphs.** With ``graphs=True`` (the default) a collective that repeats on the same
  buffers is captured once as a CUDA graph and replayed with one launch
  (:mod:`ring.gpu_graphs`), which takes the host's per-step cost off small calls.

The one schedule (:mod:`ring.schedule`) says which chunk moves when; this module only
executes it.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Sequence

import numpy as np

from . import nvtx_ranges
from .buffers import validate_buffers
from .communicator import (
    Call,
    CommunicatorClosedError,
    RingCommunicator,
    check_buffer_list,
    check_nodes,
)
from .gpu_devices import (
    OPTIONS,
    DeviceUnavailableError,
    check_algorithm_choice,
    check_options,
    device_count,
    enable_peer_access,
    import_cupy,
    node_devices,
)
from .gpu_graphs import GraphCache
from .gpu_kernels import reducer
from .gpu_steps import NodeMemory, enqueue_plan
from .ops import AVERAGING
from .schedule import Plan, check_collective, plan_for

__all__ = [
    "OPTIONS",
    "DeviceUnavailableError",
    "GpuCommunicator",
    "cache_key",
    "check_call",
    "device_count",
    "enable_peer_access",
    "import_cupy",
    "make_communicator",
    "node_devices",
]


def check_call(name: str, buffers: Sequence, op: str | None, **options) -> Call:
    """What can be checked before the communicator exists: the options, the algorithm
    and that ``buffers`` is a list (the buffers themselves are checked against its
    devices)."""
    check_collective(name)
    check_options(options)
    nodes = check_buffer_list(buffers)
    choice = check_algorithm_choice(options, nodes, name)
    return Call("gpu", name, buffers, op, nodes, options=choice)


def cache_key(nodes: int, **options) -> tuple:
    """The key under which :func:`ring.get_communicator` caches a GPU communicator: the
    algorithm is per call, so communicators differ only by their devices and settings."""
    devices, shared, force, graphs = check_options(options)
    nodes = check_nodes(nodes)
    check_algorithm_choice(options, nodes)
    return ("gpu", nodes, devices, shared, force, graphs)


def make_communicator(nodes: int, **options) -> GpuCommunicator:
    """A new :class:`GpuCommunicator` (the factory :mod:`ring.api` dispatches to)."""
    check_options(options)
    return GpuCommunicator(nodes, **options)


class GpuCommunicator(RingCommunicator):
    """Runs ring collectives on lists of CuPy arrays, node ``i`` on ``self.devices[i]``.

    Peer access is enabled once, here, for every ordered pair of distinct devices that
    supports it; ``pairs_without_peer_access`` lists the others (a warning names them too).
    Use it as a context manager, or call :meth:`close`.
    """

    backend = "gpu"

    def __init__(
        self,
        nodes: int,
        *,
        devices: Sequence[int] | None = None,
        shared_devices: bool = False,
        force_peer_copies: bool = False,
        graphs: bool = True,
        algorithm: str = "ring",
        segment_bytes: int | None = None,
        group_size: int | None = None,
    ):
        self.nodes = check_nodes(nodes)
        # What a call runs unless it says otherwise.
        self.algorithm_choice = check_algorithm_choice(
            {"algorithm": algorithm, "segment_bytes": segment_bytes, "group_size": group_size},
            self.nodes,
        )
        requested, shared, force, use_graphs = check_options(
            {
                "devices": devices,
                "shared_devices": shared_devices,
                "force_peer_copies": force_peer_copies,
                "graphs": graphs,
            }
        )
        self.graphs = GraphCache(use_graphs)
        cupy = self._cp = import_cupy()
        self.devices = node_devices(self.nodes, requested, shared, device_count())
        # True only when some device really hosts more than one node.
        self.shared_devices = len(set(self.devices)) < self.nodes
        self.force_peer_copies = force
        self._runtime = cupy.cuda.runtime
        self._closed = False
        self._call_lock = threading.Lock()
        self._timed = False
        self.peer_access, self.pairs_without_peer_access = self._enable_peer_access()
        self._make_streams_and_events()
        self._scratch: list[dict] = [{} for _ in range(self.nodes)]
        self._reducers: dict = {}
        # Per plan and node, the NVTX range pusher of each of the node's steps.
        self._pushers: dict[Plan, list] = {}

    def _make_streams_and_events(self) -> None:
        cupy, n = self._cp, self.nodes
        self._streams = []
        self._events: list[list] = []
        for node in range(n):
            with cupy.cuda.Device(self.devices[node]):
                # Non-blocking: the legacy default stream must not serialise the nodes; the
                # dependency on the caller's work is made explicit in _prologue.
                self._streams.append(cupy.cuda.Stream(non_blocking=True))
                self._events.append([])
        self._grow_events(max(2 * (n - 1), 1))
        self._ready = {}
        for d in sorted(set(self.devices)):
            with cupy.cuda.Device(d):
                self._ready[d] = cupy.cuda.Event(disable_timing=True)
        with cupy.cuda.Device(self.devices[0]):
            # Only these two carry timestamps: from "every input is ready" to "every node
            # has finished", on node 0's device.
            self._entry = cupy.cuda.Event()
            self._done = cupy.cuda.Event()
            # Forks the other nodes' streams off node 0's inside a graph capture.
            self._fork = cupy.cuda.Event(disable_timing=True)

    def _grow_events(self, steps: int) -> None:
        """An event per node per step of the longest plan run so far."""
        for node, events in enumerate(self._events):
            if len(events) < steps:
                with self._cp.cuda.Device(self.devices[node]):
                    events.extend(
                        self._cp.cuda.Event(disable_timing=True) for _ in range(steps - len(events))
                    )

    def _step_pushers(self, steps: Plan) -> list:
        pushers = self._pushers.get(steps)
        if pushers is None:
            if len(self._pushers) > 64:
                self._pushers.clear()
            pushers = self._pushers[steps] = [
                tuple(nvtx_ranges.pusher(s.name) for s in steps.node_steps(i))
                for i in range(self.nodes)
            ]
        return pushers

    def _direct(self, node: int, peer: int) -> bool:
        """Node ``node`` reads ``peer``'s memory in place (kernel / plain copy) instead of
        copying across a link when both live on one device."""
        return self.devices[peer] == self.devices[node] and not self.force_peer_copies

    def last_elapsed_ms(self) -> float:
        """Device time of the last collective in milliseconds, measured with CUDA events
        from the moment every input was ready to the moment the last node finished (the
        host's enqueueing included, as a user sees it); 0.0 when it had nothing to move."""
        if not self._timed:
            return 0.0
        return float(self._cp.cuda.get_elapsed_time(self._entry, self._done))

    def close(self) -> None:
        """Release the streams, events and scratch chunks.  Safe to call more than once."""
        if self._closed:
            return
        with self._call_lock:
            self._closed = True
            self._streams = []
            self._events = []
            self._scratch = []
            self._ready = {}
            self.graphs.clear()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"GpuCommunicator(nodes={self.nodes}, devices={list(self.devices)}, {state})"

    # -- setup ---------------------------------------------------------------------------

    def _enable_peer_access(self) -> tuple[dict, tuple]:
        runtime = self._runtime
        distinct = sorted(set(self.devices))
        access: dict[tuple[int, int], bool] = {}
        missing = []
        for a in distinct:
            for b in distinct:
                if a == b:
                    continue
                ok = bool(runtime.deviceCanAccessPeer(a, b))
                if ok:
                    with self._cp.cuda.Device(a):
                        enable_peer_access(runtime, b)
                else:
                    missing.append((a, b))
                access[(a, b)] = ok
        if missing:
            pairs = ", ".join(f"{a}->{b}" for a, b in missing)
            warnings.warn(
                f"no peer access between CUDA devices {pairs}: cudaMemcpyPeerAsync stages "
                "those copies through host memory, so they are slower",
                RuntimeWarning,
                stacklevel=3,
            )
        return access, tuple(missing)

    def _scratch_for(self, node: int, dtype: np.dtype, elements: int, role: str = "landing"):
        """Node ``node``'s scratch (``landing`` for ranges received across a link,
        ``algorithm`` for the plan's own), grown when a call needs more.  Only called
        before any work of the call is queued, and every earlier call has finished, so
        replacing it can never free memory a stream still uses."""
        cache = self._scratch[node]
        scratch = cache.get((role, dtype))
        if scratch is None or scratch.size < elements:
            with self._cp.cuda.Device(self.devices[node]):
                scratch = cache[(role, dtype)] = self._cp.empty(elements, dtype=dtype)
        return scratch

    # -- one collective --------------------------------------------------------------------

    def _check(self, buffers: Sequence):
        count, dtype = validate_buffers(buffers, array_type=self._cp.ndarray, kind="CuPy")
        if len(buffers) != self.nodes:
            raise ValueError(
                f"this communicator has {self.nodes} nodes but {len(buffers)} buffers were given"
            )
        for i, buf in enumerate(buffers):
            where = buf.device.id
            if where != self.devices[i]:
                raise ValueError(
                    f"buffers[{i}] is on device {where} but node {i} runs on device "
                    f"{self.devices[i]}: allocate it there (with cupy.cuda.Device"
                    f"({self.devices[i]}): ...) or pass devices=[...] to match the buffers"
                )
        return count, np.dtype(dtype)

    def _collective(self, name: str, buffers: Sequence, op: str | None, **options) -> None:
        """A call that names its algorithm names its options too; one that does not runs
        the communicator's, with any option it gives."""
        given = {k: v for k, v in options.items() if v is not None}
        chosen = given if "algorithm" in given else {**self.algorithm_choice, **given}
        self.execute(check_call(name, buffers, op, **chosen))

    def execute(self, call: Call) -> None:
        """Run a call :func:`check_call` accepted; raises :class:`CommunicatorClosedError`
        only before any of its work is queued."""
        self._check_call_backend(call)
        if self._closed:
            raise CommunicatorClosedError(f"{self!r} is closed: create a new communicator")
        name, op = call.name, call.op
        count, dtype = self._check(call.buffers)
        reduce = None
        if name != "all_gather":  # op=None is no op for the collectives that reduce
            reduce = self._reducers.get((op, dtype))
            if reduce is None:
                reduce = self._reducers[(op, dtype)] = reducer(self._cp, op, dtype)
        with self._call_lock:
            if self._closed:
                raise CommunicatorClosedError(f"{self!r} is closed: create a new communicator")
            self._timed = False
            if self.nodes == 1 or count == 0:
                return
            choice = call.options or self.algorithm_choice
            steps = plan_for(name, self.nodes, count, dtype.itemsize, choice["algorithm"], choice)
            with nvtx_ranges.annotate(name):
                self._run(steps, list(call.buffers), op, reduce, dtype)

    def _run(self, steps: Plan, buffers: list, op, reduce, dtype: np.dtype) -> None:
        # avg divides each completed range once; integers need a temporary (landing) for it.
        average = reduce is not None and op in AVERAGING
        elements = steps.scratch_elements
        memory = NodeMemory(
            buffers,
            [
                self._scratch_for(i, dtype, elements)
                if reduce is not None and (average or self._lands_in_scratch(steps, i))
                else None
                for i in range(self.nodes)
            ],
            [
                self._scratch_for(i, dtype, elements, "algorithm") if steps.uses_scratch else None
                for i in range(self.nodes)
            ],
        )
        self._grow_events(steps.steps)
        pushers = self._step_pushers(steps)
        key = (
            steps,
            tuple(memory.ptrs),
            tuple(s.data.ptr if s is not None else 0 for s in memory.landing),
            tuple(s.data.ptr if s is not None else 0 for s in memory.scratch),
            dtype.str,
            op,
        )
        runtime = self._runtime
        caller_device = runtime.getDevice()
        first = self._streams[0]
        try:
            self._prologue()
            how, graph = self.graphs.lookup(key)
            if how == "capture":
                graph = self.graphs.capture(
                    key,
                    first,
                    lambda: self._steps(self._fork, steps, memory, reduce, average, pushers),
                )
            runtime.setDevice(self.devices[0])
            if graph is not None:
                graph.launch(stream=first)
            else:
                self._steps(self._entry, steps, memory, reduce, average, pushers)
            self._finish()
        except BaseException:
            # Never hand back buffers that queued work may still be writing.
            for stream in self._streams:
                with contextlib.suppress(Exception):
                    stream.synchronize()
            raise
        finally:
            runtime.setDevice(caller_device)

    def _steps(self, fork, steps: Plan, memory: NodeMemory, reduce, average: bool, pushers):
        """Queue the whole collective (:func:`ring.gpu_steps.enqueue_plan`)."""
        enqueue_plan(self, fork, steps, memory, reduce, average, pushers)

    def _lands_in_scratch(self, steps: Plan, node: int) -> bool:
        """Whether ``node`` receives some range to accumulate across a link (into its
        landing area)."""
        return any(
            m.accumulate
            and not m.from_scratch
            and m.peer != node
            and not self._direct(node, m.peer)
            for s in steps.node_steps(node)
            for m in s.moves
        )

    def _peer_copy(self, dst: int, dst_node: int, src: int, src_node: int, size: int, stream):
        self._runtime.memcpyPeerAsync(
            dst, self.devices[dst_node], src, self.devices[src_node], size, stream.ptr
        )

    def _prologue(self) -> None:
        """Make node 0's stream start after the caller's queued work on every device
        (e.g. whatever wrote the inputs), then record the timed entry event there."""
        runtime = self._runtime
        cuda = self._cp.cuda
        for d, ready in self._ready.items():
            runtime.setDevice(d)
            ready.record(cuda.get_current_stream(d))
        runtime.setDevice(self.devices[0])
        first = self._streams[0]
        for ready in self._ready.values():
            first.wait_event(ready)
        self._entry.record(first)

    def _finish(self) -> None:
        """Node 0's stream has joined every node's last step: the host waits once."""
        self._done.record(self._streams[0])
        self._timed = True
        self._done.synchronize()
