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
  reduces it into the node's own chunk (:mod:`ring.gpu.kernels`: ours, with 16-byte vector
  accesses, or CuPy's ufunc for what ours does not cover); no host round trip.
* **Synchronisation.** A stream per node and an event per node per step.  Step ``t`` on
  node ``i`` waits (``cudaStreamWaitEvent``) only on node ``i - 1``'s event from step
  ``t - 1``, exactly the dependency the schedule has.  That wait also covers the
  write-after-read hazard: stream order makes node ``i``'s step ``t`` wait transitively for
  node ``i + 1``'s step ``t - (N - 1)``, the last one that reads what node ``i``
  overwrites at ``t`` (see :mod:`ring.cpu`).  The scratch chunk is written and read only
  on its own node's stream, so reusing it every step is ordered by the stream itself.
  Every call starts after the work already queued on the caller's current stream of each
  device, and the host waits once, at the end, on a single event; or, with ``stream=``
  or ``async_op=True``, after the work on the caller's given streams, which then wait
  for it instead of the host (:mod:`ring.gpu.caller`).
* **Several streams per node** (``streams=``, two by default for ring-segmented): each
  move then waits for exactly the moves whose ranges it depends on (:mod:`ring.gpu.hazards`)
  and independent chains run on different streams, so node ``i`` copies block ``k + 1``
  while it reduces block ``k``.  Each stream has its own landing area.
* **Graphs.** With ``graphs=True`` (the default) a collective that repeats on the same
  buffers is captured once as a CUDA graph and replayed with one launch
  (:mod:`ring.gpu.graphs`), which takes the host's per-step cost off small calls.

The one schedule (:mod:`ring.schedule`) says which chunk moves when; this package only
executes it: this module checks calls and holds the communicator, :mod:`ring.gpu.resources`
its streams, events and scratch, :mod:`ring.gpu.caller` the caller's streams and handles,
:mod:`ring.gpu.run` one call, :mod:`ring.gpu.steps` the moves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Sequence

import numpy as np

from .. import nvtx
from ..communicator import (
    Call,
    RingCommunicator,
    check_buffer_list,
    check_nodes,
    flattened,
    normalized_op,
    track,
    validate_buffers,
)
from ..planning.race import Trial
from ..schedule import AUTO, Plan, check_collective, plan_for
from .caller import BLOCKING, GpuWork, Ordering, check_stream, copy_sends, node_streams
from .devices import (
    OPTIONS,
    DeviceUnavailableError,
    check_algorithm_choice,
    check_options,
    check_streams,
    device_count,
    enable_peer_access,
    import_cupy,
    node_devices,
)
from .graphs import GraphCache
from .kernels import reducer
from .planning import GpuPlanner
from .resources import DeviceResources
from .run import CallRunner, streams_for

__all__ = [
    "OPTIONS",
    "PER_CALL_OPTIONS",
    "DeviceUnavailableError",
    "GpuCommunicator",
    "GpuWork",
    "cache_key",
    "check_call",
    "device_count",
    "enable_peer_access",
    "import_cupy",
    "make_communicator",
    "node_devices",
    "queued_call",
]

# Options of each call, never of a communicator: ring.api's cache key leaves them out and
# ring.get_communicator refuses them (see ring.gpu.caller).
PER_CALL_OPTIONS = ("stream",)


def check_call(name: str, buffers: Sequence, op: str | None, **options) -> Call:
    """What can be checked before the communicator exists: the options, the algorithm,
    ``stream`` (its type and count; its devices against the nodes' by the communicator)
    and that ``buffers`` is a list (the buffers themselves are checked against its
    devices)."""
    check_collective(name)
    stream = options.pop("stream", None)
    check_options(options)
    nodes = check_buffer_list(buffers)
    choice = check_algorithm_choice(options, nodes, name)
    streams = check_stream(stream, nodes)
    order = BLOCKING if streams is None else Ordering(streams)
    flat = flattened(list(buffers))
    return Call("gpu", name, flat, normalized_op(op), nodes, options=choice, checked=order)


def queued_call(call: Call, send: list | None, async_op: bool) -> Call:
    """``call`` (from :func:`check_call`) out of place from ``send`` (checked against its
    buffers, :func:`ring.place.check_send`) and/or returning a handle: what
    :mod:`ring.api` passes for ``recv=`` and ``async_op=True``, which this backend runs on
    the call's streams instead of a host thread (:mod:`ring.gpu.caller`)."""
    order = dataclasses.replace(call.checked, send=send, handle=async_op)
    return dataclasses.replace(call, checked=order)


def _communicator_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k not in PER_CALL_OPTIONS}


def cache_key(nodes: int, **options) -> tuple:
    """The key under which :func:`ring.get_communicator` caches a GPU communicator: the
    algorithm and ``stream`` are per call, so communicators differ only by their devices
    and settings."""
    options = _communicator_options(options)
    devices, shared, force, graphs = check_options(options)
    streams = check_streams(options)
    nodes = check_nodes(nodes)
    check_algorithm_choice(options, nodes)
    return ("gpu", nodes, devices, shared, force, graphs, streams)


def make_communicator(nodes: int, **options) -> GpuCommunicator:
    """A new :class:`GpuCommunicator` (the factory :mod:`ring.api` dispatches to)."""
    options = _communicator_options(options)
    check_options(options)
    return GpuCommunicator(nodes, **options)


class GpuCommunicator(DeviceResources, CallRunner, RingCommunicator):
    """Runs ring collectives on lists of CuPy arrays, node ``i`` on ``self.devices[i]``.

    Peer access is enabled once, here, for every ordered pair of distinct devices that
    supports it; ``pairs_without_peer_access`` lists the others (a warning names them too).
    ``streams``: CUDA streams per node (None: two for ring-segmented, whose blocks then
    overlap, one for the other algorithms; see :mod:`ring.gpu.hazards`).  Use it as a
    context manager, or call :meth:`close`.

    Each collective takes ``stream=``: one CuPy stream (every node on its device) or one
    per node.  The call then starts after the work queued on those streams, work queued
    on them afterwards runs after it, and the host does not wait (NCCL's ``stream``
    argument; :mod:`ring.gpu.caller`).  Without it the call starts after the current
    stream of every device and returns once done.
    """

    backend = "gpu"
    _fork_refusal = (
        "CUDA cannot be used in a process made by fork() once its parent used it (start "
        "such processes with multiprocessing's 'spawn')"
    )

    def __init__(
        self,
        nodes: int,
        *,
        devices: Sequence[int] | None = None,
        shared_devices: bool = False,
        force_peer_copies: bool = False,
        graphs: bool = True,
        streams: int | None = None,
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
        self.streams = check_streams({"streams": streams})
        self.graphs = GraphCache(use_graphs)
        cupy = self.cp = import_cupy()
        self.devices = node_devices(self.nodes, requested, shared, device_count())
        # True only when some device really hosts more than one node.
        self.shared_devices = len(set(self.devices)) < self.nodes
        self.force_peer_copies = force
        self.runtime = cupy.cuda.runtime
        self._closed = False
        self._call_lock = threading.Lock()
        self._timed = False
        self._waited = True  # whether the host waited for the last timed call
        self.peer_access, self.pairs_without_peer_access = self._enable_peer_access()
        self._make_streams_and_events()
        track(self)
        self._scratch: list[dict] = [{} for _ in range(self.nodes)]
        self._reducers: dict = {}
        self._l2_bytes: int | None = None  # the smallest L2 of the devices, once asked
        # Per plan and node, the NVTX range pusher of each of the node's steps.
        self._pushers: dict[Plan, list] = {}
        self._planner = GpuPlanner(self.nodes)

    def allreduce(self, buffers: Sequence, op: str = "sum", *, stream=None) -> None:
        """Reduce the nodes' buffers element-wise with ``op``; every node gets the result.
        ``stream``: order the call on the caller's stream(s) instead of blocking the host
        (see the class)."""
        self._collective("allreduce", buffers, op, stream=stream)

    def reduce_scatter(self, buffers: Sequence, op: str = "sum", *, stream=None) -> None:
        """Afterwards node ``i`` holds chunk ``owned_chunk(i, N)`` fully reduced.
        ``stream`` as for :meth:`allreduce`."""
        self._collective("reduce_scatter", buffers, op, stream=stream)

    def all_gather(self, buffers: Sequence, *, stream=None) -> None:
        """Copy chunk ``owned_chunk(i, N)`` of every node ``i`` to all nodes (no reduction).
        ``stream`` as for :meth:`allreduce`."""
        self._collective("all_gather", buffers, None, stream=stream)

    def last_elapsed_ms(self) -> float:
        """Device time of the last collective in milliseconds, measured with CUDA events
        from the moment every input was ready to the moment the last node finished (the
        host's enqueueing included, as a user sees it); 0.0 when it had nothing to move.
        After a call the host did not wait for (``stream=``, ``async_op``) it waits for
        that call's end first."""
        with self._call_lock:
            if not self._timed:
                return 0.0
            if not self._waited:
                self._done.synchronize()
                self._waited = True
            return float(self.cp.cuda.get_elapsed_time(self.entry_event, self._done))

    def close(self) -> None:
        """Release the streams, events and scratch chunks, once the work queued on them
        (by calls the host did not wait for) is done.  Safe to call more than once."""
        if self._closed:
            return
        with self._call_lock:
            self._closed = True
            self._release()
            self.graphs.clear()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"GpuCommunicator(nodes={self.nodes}, devices={list(self.devices)}, {state})"

    # -- one collective --------------------------------------------------------------------

    def _check(self, buffers: Sequence):
        count, dtype = validate_buffers(buffers, array_type=self.cp.ndarray, kind="CuPy")
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
        check_buffer_list(buffers)
        self.execute(check_call(name, list(buffers), op, **chosen))  # one snapshot, as ring.api

    def execute(self, call: Call) -> GpuWork | None:
        """Run a call :func:`check_call` accepted, ordered as its ``checked``
        (:class:`ring.gpu.caller.Ordering`) says; raises :class:`CommunicatorClosedError`,
        or what is wrong with its streams, only before any of its work is queued.  A
        handle when the call asked for one (``async_op``), else None."""
        self._check_call_backend(call)
        if self._closed:
            raise self._closed_error()
        name, op = call.name, call.op
        count, dtype = self._check(call.buffers)
        order = call.checked if isinstance(call.checked, Ordering) else BLOCKING
        given = None if order.streams is None else node_streams(self.devices, order.streams)
        reduce = None
        if name != "all_gather":  # op=None is no op for the collectives that reduce
            reduce = self._reducers.get((op, dtype))
            if reduce is None:
                reduce = self._reducers[(op, dtype)] = reducer(self.cp, op, dtype)
        with self._call_lock:
            if self._closed:
                raise self._closed_error()
            self._timed = False
            sides = self._sides(given)
            if order.send is not None:
                self._copy_sends(order.send, list(call.buffers), given, sides)
            if self.nodes > 1 and count:
                steps, trial = self._plan(name, count, dtype, op, call.options, order)
                started = time.perf_counter()
                with nvtx.call_range(name):
                    self._run(steps, list(call.buffers), op, reduce, dtype, sides, order.blocking)
                if trial is not None:  # a call the host waited for: timed for auto's trial
                    seconds = time.perf_counter() - started
                    trial.record((steps.algorithm,), seconds, run=seconds)
            return self._handle(sides) if order.handle else None

    def _plan(
        self, name: str, count: int, dtype: np.dtype, op, options: dict, order: Ordering
    ) -> tuple[Plan, Trial | None]:
        """The plan of the call's algorithm (or the communicator's), and the trial of
        ``auto`` that times it (None: no trial): ``auto`` measures (:mod:`ring.gpu.planning`)
        where the host waits for the call, and takes the best so far where it does not."""
        choice = options or self.algorithm_choice
        algorithm, trial = choice["algorithm"], None
        if algorithm == AUTO:
            timed = order.blocking and order.send is None
            nbytes = count * dtype.itemsize
            algorithm, trial = self._planner.choose(name, dtype.str, op, nbytes, timed)
        # auto's pick gets the defaults the algorithm gets when named (its segment).
        choice = self._with_segment({**choice, "algorithm": algorithm})
        return plan_for(name, self.nodes, count, dtype.itemsize, algorithm, choice), trial

    def _copy_sends(self, send: list, recv: list, given, sides: list) -> None:
        """``recv=``'s copies, each on its node's call stream (given, or the current one of
        its device); a failure waits for those streams before it propagates."""
        current = self.cp.cuda.get_current_stream
        streams = given if given is not None else [current(d) for d in self.devices]
        caller_device = self.runtime.getDevice()
        try:
            copy_sends(self.cp, self.devices, send, recv, streams)
        except BaseException:
            for _, stream in sides:
                with contextlib.suppress(Exception):
                    stream.synchronize()
            raise
        finally:
            self.runtime.setDevice(caller_device)

    def _with_segment(self, choice: dict) -> dict:
        """ring-segmented's block, when the call names none, from the devices' L2 cache:
        each of a node's streams works on one block at a time, which all N nodes hold a
        copy of, and each stream lands one piece (a block's N-th) per node, so the blocks
        in flight take streams * (N + 1) * block bytes; they fit the smallest L2 of the
        devices, so what a node writes is still there when its neighbour reads it.  A
        device that reports no L2 size gets the schedule's default."""
        if choice["algorithm"] != "ring-segmented" or choice.get("segment_bytes"):
            return choice
        if self._l2_bytes is None:
            sizes = [
                int(self.runtime.getDeviceProperties(d).get("l2CacheSize") or 0)
                for d in sorted(set(self.devices))
            ]
            self._l2_bytes = min(sizes)
        if not self._l2_bytes:
            return choice
        streams = streams_for(choice["algorithm"], self.streams)
        segment = max(1, self._l2_bytes // (streams * (self.nodes + 1)))
        return {**choice, "segment_bytes": segment}
