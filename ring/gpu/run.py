"""One collective of :class:`ring.gpu.GpuCommunicator`, from a plan to the host's one wait.

The call's memory is gathered first (buffers, landing areas, the algorithm's scratch),
then node 0's first stream waits for the caller's queued work on every stream the call is
ordered on (:mod:`ring.gpu.caller`: the current stream of every device by default), the
plan is queued (or a CUDA graph of it replayed, :mod:`ring.gpu.graphs`) and an event is
recorded after every node's last move: the host waits once, on it, or (``stream=``,
``async_op``) the caller's streams wait for it instead.  The plan runs on one stream per node
with the plan's own step waits (:func:`ring.gpu.steps.enqueue_plan`), or, with several
streams per node, with the waits derived from its ranges
(:func:`ring.gpu.steps.enqueue_streams`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import nvtx
from ..ops import AVERAGING
from ..schedule import Plan
from .caller import GpuWork
from .graphs import GraphCache
from .hazards import stream_schedule
from .steps import NodeMemory, enqueue_plan, enqueue_streams

__all__ = ["MULTI_STREAM_ALGORITHMS", "CallRunner", "streams_for"]

# The algorithms whose moves are independent enough for several streams to overlap them
# (ring-segmented's blocks); the others keep one stream per node by default.
MULTI_STREAM_ALGORITHMS = {"ring-segmented": 2}


def streams_for(algorithm: str, requested: int | None) -> int:
    """Streams per node for a call: what the communicator was given, else the default of
    the algorithm."""
    return requested if requested is not None else MULTI_STREAM_ALGORITHMS.get(algorithm, 1)


class CallRunner:
    """Mixin of :class:`ring.gpu.GpuCommunicator`: runs one planned collective."""

    cp: Any
    runtime: Any
    devices: tuple[int, ...]
    nodes: int
    force_peer_copies: bool
    graphs: GraphCache
    streams: int | None
    _timed: bool
    _waited: bool
    _pushers: dict

    # Provided by ring.gpu.resources.DeviceResources.
    stream_rows: list[list]
    _ready: dict
    _ready_event: Any
    _retired: list
    _drain: Any
    entry_event: Any
    _done: Any
    _fork: Any
    _scratch_for: Any
    _grow_events: Any
    _grow_streams: Any
    _grow_move_events: Any

    def reads_directly(self, node: int, peer: int) -> bool:
        """Node ``node`` reads ``peer``'s memory in place (kernel / plain copy) instead of
        copying across a link when both live on one device."""
        return self.devices[peer] == self.devices[node] and not self.force_peer_copies

    def _step_pushers(self, steps: Plan) -> list:
        pushers = self._pushers.get(steps)
        if pushers is None:
            if len(self._pushers) > 64:
                self._pushers.clear()
            pushers = self._pushers[steps] = [
                tuple(nvtx.pusher(s.name) for s in steps.node_steps(i)) for i in range(self.nodes)
            ]
        return pushers

    def _memory(self, steps: Plan, buffers: list, reduce, average: bool, dtype, count: int):
        elements = steps.scratch_elements

        def landing(i: int):
            if reduce is None or not (average or self._lands_in_scratch(steps, i)):
                return None
            return [self._scratch_for(i, dtype, elements, "landing", s) for s in range(count)]

        return NodeMemory(
            buffers,
            [landing(i) for i in range(self.nodes)],
            [
                self._scratch_for(i, dtype, elements, "algorithm") if steps.uses_scratch else None
                for i in range(self.nodes)
            ],
        )

    def _run(
        self, steps: Plan, buffers: list, op, reduce, dtype: np.dtype, sides: list, blocking: bool
    ) -> None:
        # avg divides each completed range once; integers need a temporary (landing) for it.
        average = reduce is not None and op in AVERAGING
        count = streams_for(steps.algorithm, self.streams)
        schedule = stream_schedule(steps, count) if count > 1 else None
        if schedule is None:
            self._grow_events(steps.steps)
        else:
            self._grow_streams(count)
            self._grow_move_events(schedule.events)
        memory = self._memory(steps, buffers, reduce, average, dtype, count)
        pushers = self._step_pushers(steps)
        key = (
            steps,
            count,
            tuple(memory.ptrs),
            tuple(tuple(x.data.ptr for x in s) if s is not None else () for s in memory.landing),
            tuple(s.data.ptr if s is not None else 0 for s in memory.scratch),
            dtype.str,
            op,
        )

        self._launch(
            key,
            lambda fork: self._steps(fork, steps, schedule, memory, reduce, average, pushers),
            sides,
            blocking,
        )

    def _steps(self, fork, steps: Plan, schedule, memory, reduce, average: bool, pushers):
        """Queue the whole collective: on one stream per node with the plan's waits, or on
        ``schedule``'s streams with its derived ones."""
        if schedule is None:
            enqueue_plan(self, fork, steps, memory, reduce, average, pushers)
        else:
            enqueue_streams(self, fork, steps, schedule, memory, reduce, average, pushers)

    def _launch(self, key, body, sides: list, blocking: bool) -> None:
        """Queue ``body`` (or replay its graph) between the prologue (after the caller's
        ``sides``) and the end: the host's wait when ``blocking``, else the sides' waits."""
        runtime = self.runtime
        caller_device = runtime.getDevice()
        first = self.stream_rows[0][0]
        try:
            self._prologue(sides)
            how, graph = self.graphs.lookup(key)
            if how == "capture":
                graph = self.graphs.capture(key, first, lambda: body(self._fork))
            runtime.setDevice(self.devices[0])
            if graph is not None:
                graph.launch(stream=first)
            else:
                body(self.entry_event)
            self._finish(sides, blocking)
        except BaseException:
            # Never hand back buffers that queued work may still be writing; no caller's
            # stream waits for the failed call (its waits come last, after the done record).
            self._drain()
            raise
        finally:
            runtime.setDevice(caller_device)

    def _lands_in_scratch(self, steps: Plan, node: int) -> bool:
        """Whether ``node`` receives some range to accumulate across a link (into its
        landing area)."""
        return any(
            m.accumulate
            and not m.from_scratch
            and m.peer != node
            and not self.reads_directly(node, m.peer)
            for s in steps.node_steps(node)
            for m in s.moves
        )

    def peer_copy(self, dst: int, dst_node: int, src: int, src_node: int, size: int, stream):
        self.runtime.memcpyPeerAsync(
            dst, self.devices[dst_node], src, self.devices[src_node], size, stream.ptr
        )

    def _sides(self, streams: Sequence | None) -> list[tuple[int, Any]]:
        """The distinct (device, stream) pairs a call is ordered on: node ``i``'s of
        ``streams``, or else the caller's current stream of every device the nodes use."""
        if streams is None:
            current = self.cp.cuda.get_current_stream
            return [(d, current(d)) for d in sorted(set(self.devices))]
        sides: dict[tuple[int, int], tuple[int, Any]] = {}
        for device, stream in zip(self.devices, streams, strict=True):
            sides.setdefault((device, stream.ptr), (device, stream))
        return list(sides.values())

    def _prologue(self, sides: list) -> None:
        """Make node 0's stream start after the work queued on the caller's ``sides`` (e.g.
        whatever wrote the inputs), then record the timed entry event there."""
        runtime = self.runtime
        ready: list = []
        used: dict[int, int] = {}
        for device, stream in sides:
            index = used[device] = used.get(device, -1) + 1
            event = self._ready_event(device, index)
            runtime.setDevice(device)
            event.record(stream)
            ready.append(event)
        runtime.setDevice(self.devices[0])
        first = self.stream_rows[0][0]
        for event in ready:
            first.wait_event(event)
        self.entry_event.record(first)

    def _finish(self, sides: list, blocking: bool) -> None:
        """Node 0's stream has joined every node's last step: the host waits once, or each
        of the caller's ``sides`` waits (the wait takes this call's record of the event, so
        the next call may record it again at once)."""
        self._done.record(self.stream_rows[0][0])
        self._timed = True
        self._waited = blocking
        if blocking:
            self._done.synchronize()
            self._retired.clear()
            return
        runtime = self.runtime
        for device, stream in sides:
            runtime.setDevice(device)
            stream.wait_event(self._done)

    def _handle(self, sides: list) -> GpuWork:
        """``async_op``'s handle: an event on each side, right after its wait for the call."""
        cuda, runtime = self.cp.cuda, self.runtime
        caller_device = runtime.getDevice()
        events = []
        try:
            for device, stream in sides:
                runtime.setDevice(device)
                event = cuda.Event(disable_timing=True)
                event.record(stream)
                events.append(event)
        finally:
            runtime.setDevice(caller_device)
        return GpuWork(events)
