"""Any algorithm's plan enqueued on the GPU backend's streams (:class:`ring.gpu.GpuCommunicator`).

Every node's step ``t`` runs on its own stream after the events of step ``t - 1`` of the
peers it ``waits`` for (:mod:`ring.schedule.steps`): the dependencies of the plan, nothing
more, as the CPU backend's pairwise tokens.  A move that reads a peer on another device
(or any peer, with ``force_peer_copies``) first copies the range across the link: into
the node's landing area when it is accumulated (then the reduction kernel reads it there),
straight into place when it is copied.  A move that reads memory of its own device reads
it where it lies (the kernel reads the peer's range; a copy is a device-to-device copy).
One landing area per node suffices: its copies and kernels run in stream order.  Ranges
a move marks ``completes`` get ``avg``'s division right after, on the same stream.

With several streams per node (:func:`enqueue_streams`) each move runs on the stream and
after the events :mod:`ring.gpu.hazards` derived from its ranges instead, and every
stream has its own landing area, so moves on different streams of a node never share one.
"""

from __future__ import annotations

from typing import Any

from .. import nvtx
from ..ops import divide_by_nodes
from ..schedule import Plan
from .hazards import StreamSchedule

__all__ = ["NodeMemory", "enqueue_plan", "enqueue_streams"]


class NodeMemory:
    """One call's device memory: every node's buffer, landing areas (one per stream) and
    (for plans that use it) the algorithm's scratch; ``None`` where a node needs none."""

    __slots__ = ("buffers", "landing", "ptrs", "scratch")

    def __init__(self, buffers: list, landing: list, scratch: list):
        self.buffers = buffers
        self.landing = landing
        self.scratch = scratch
        self.ptrs = [buf.data.ptr for buf in buffers]


def enqueue_plan(comm, fork, steps: Plan, memory: NodeMemory, reduce, average: bool, pushers):
    """Queue the whole collective: the other nodes' streams fork off node 0's through
    ``fork``, every step of every node, and node 0's stream joins their last steps."""
    runtime = comm.runtime
    devices, streams, events = comm.devices, comm.first_streams, comm.step_events
    per_node = [steps.node_steps(i) for i in range(comm.nodes)]
    pop = nvtx.pop
    runtime.setDevice(devices[0])
    if fork is not comm.entry_event:
        fork.record(streams[0])
    for stream in streams[1:]:
        stream.wait_event(fork)
    current = devices[0]
    for t in range(steps.steps):
        for i, node_steps in enumerate(per_node):
            step = node_steps[t]
            pushers[i][t]()
            try:
                if devices[i] != current:
                    current = devices[i]
                    runtime.setDevice(current)
                stream = streams[i]
                if t:
                    for peer in step.waits:
                        if peer != i:
                            stream.wait_event(events[peer][t - 1])
                landing = memory.landing[i]
                for move in step.moves:
                    _move(
                        comm,
                        i,
                        move,
                        memory,
                        landing[0] if landing else None,
                        reduce,
                        average,
                        stream,
                    )
                events[i][t].record(stream)
            finally:
                pop()
    runtime.setDevice(devices[0])
    last = steps.steps - 1
    for i in range(1, comm.nodes):
        streams[0].wait_event(events[i][last])


def enqueue_streams(
    comm, fork, steps: Plan, schedule: StreamSchedule, memory: NodeMemory, reduce, average, pushers
):
    """Queue the whole collective on ``schedule.streams`` streams per node: every stream
    forks off node 0's first stream through ``fork``, each move waits for the events of
    the moves it depends on, and node 0's first stream joins the other streams' last moves."""
    runtime = comm.runtime
    devices, streams, events = comm.devices, comm.stream_rows, comm.move_events
    per_node = [steps.node_steps(i) for i in range(comm.nodes)]
    pop = nvtx.pop
    runtime.setDevice(devices[0])
    first = streams[0][0]
    if fork is not comm.entry_event:
        fork.record(first)
    for i, s in schedule.forks:
        streams[i][s].wait_event(fork)
    current, opened = devices[0], None
    try:
        for op in schedule.ops:
            if (op.node, op.step) != opened:
                if opened is not None:
                    pop()
                opened = (op.node, op.step)
                pushers[op.node][op.step]()
            if devices[op.node] != current:
                current = devices[op.node]
                runtime.setDevice(current)
            stream = streams[op.node][op.stream]
            for peer, event in op.waits:
                stream.wait_event(events[peer][event])
            move = per_node[op.node][op.step].moves[op.index]
            landing = memory.landing[op.node]
            landing = landing[op.stream] if landing else None
            _move(comm, op.node, move, memory, landing, reduce, average, stream)
            if op.record >= 0:
                events[op.node][op.record].record(stream)
    finally:
        if opened is not None:
            pop()
    runtime.setDevice(devices[0])
    for i, _, event in schedule.joins:
        first.wait_event(events[i][event])


def _move(
    comm, node: int, move, memory: NodeMemory, landing, reduce, average: bool, stream
) -> None:
    a, b = move.src
    if a == b:
        return  # an empty range (fewer elements than chunks): nothing to queue
    c, d = move.dst
    own = memory.scratch[node] if move.to_scratch else memory.buffers[node]
    target = own[c:d]
    itemsize = target.dtype.itemsize
    source: Any
    landed = None
    if move.from_scratch:
        source = memory.scratch[node][a:b]
    elif move.peer == node or comm.reads_directly(node, move.peer):
        source = memory.buffers[move.peer][a:b]
    else:
        landed = landing[: b - a] if move.accumulate else target
        comm.peer_copy(
            landed.data.ptr,
            node,
            memory.ptrs[move.peer] + a * itemsize,
            move.peer,
            (b - a) * itemsize,
            stream,
        )
        source = landed if move.accumulate else None
    if source is not None:
        if move.accumulate and move.source_first:
            if not (move.from_scratch or source is landed):
                raise ValueError("a source-first move must read scratch or its landing area")
            _reduce_source_first(comm, target, source, reduce, stream)
        elif move.accumulate:
            reduce(target, source, stream)
        else:
            runtime = comm.runtime
            runtime.memcpyAsync(
                target.data.ptr,
                source.data.ptr,
                (b - a) * itemsize,
                runtime.memcpyDeviceToDevice,
                stream.ptr,
            )
    if average and move.completes and not move.to_scratch:
        with stream:
            divide_by_nodes(target, comm.nodes, comm.cp, landing)


def _reduce_source_first(comm, target, source, reduce, stream) -> None:
    """``target = source op target`` (``Move.source_first``): the kernel computes
    ``dst = dst op src``, so it reduces into ``source`` (the node's own scratch or landing
    area, whose contents the plan does not read again) and copies the result over."""
    runtime = comm.runtime
    reduce(source, target, stream)
    runtime.memcpyAsync(
        target.data.ptr,
        source.data.ptr,
        target.nbytes,
        runtime.memcpyDeviceToDevice,
        stream.ptr,
    )
