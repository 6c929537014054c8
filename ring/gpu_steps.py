"""Any algorithm's plan enqueued on the GPU backend's streams (:class:`ring.gpu.GpuCommunicator`).

Every node's step ``t`` runs on its own stream after the events of step ``t - 1`` of the
peers it ``waits`` for (:mod:`ring.schedule_core`): the dependencies of the plan, nothing
more, as the CPU backend's pairwise tokens.  A move that reads a peer on another device
(or any peer, with ``force_peer_copies``) first copies the range across the link: into
the node's landing area when it is accumulated (then the reduction kernel reads it there),
straight into place when it is copied.  A move that reads memory of its own device reads
it where it lies (the kernel reads the peer's range; a copy is a device-to-device copy).
One landing area per node suffices: its copies and kernels run in stream order.  Ranges
a move marks ``completes`` get ``avg``'s division right after, on the same stream.
"""

from __future__ import annotations

from typing import Any

from . import nvtx_ranges
from .ops import divide_by_nodes
from .schedule import Plan

__all__ = ["NodeMemory", "enqueue_plan"]


class NodeMemory:
    """One call's device memory: every node's buffer, landing area and (for plans that
    use it) the algorithm's scratch; ``None`` where a node needs none."""

    __slots__ = ("buffers", "landing", "ptrs", "scratch")

    def __init__(self, buffers: list, landing: list, scratch: list):
        self.buffers = buffers
        self.landing = landing
        self.scratch = scratch
        self.ptrs = [buf.data.ptr for buf in buffers]


def enqueue_plan(comm, fork, steps: Plan, memory: NodeMemory, reduce, average: bool, pushers):
    """Queue the whole collective: the other nodes' streams fork off node 0's through
    ``fork``, every step of every node, and node 0's stream joins their last steps."""
    runtime = comm._runtime
    devices, streams, events = comm.devices, comm._streams, comm._events
    per_node = [steps.node_steps(i) for i in range(comm.nodes)]
    pop = nvtx_ranges.pop
    runtime.setDevice(devices[0])
    if fork is not comm._entry:
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
                for move in step.moves:
                    _move(comm, i, move, memory, reduce, average, stream)
                events[i][t].record(stream)
            finally:
                pop()
    runtime.setDevice(devices[0])
    last = steps.steps - 1
    for i in range(1, comm.nodes):
        streams[0].wait_event(events[i][last])


def _move(comm, node: int, move, memory: NodeMemory, reduce, average: bool, stream) -> None:
    a, b = move.src
    if a == b:
        return  # an empty range (fewer elements than chunks): nothing to queue
    c, d = move.dst
    own = memory.scratch[node] if move.to_scratch else memory.buffers[node]
    target = own[c:d]
    itemsize = target.dtype.itemsize
    source: Any
    if move.from_scratch:
        source = memory.scratch[node][a:b]
    elif move.peer == node or comm._direct(node, move.peer):
        source = memory.buffers[move.peer][a:b]
    else:
        landed = memory.landing[node][: b - a] if move.accumulate else target
        comm._peer_copy(
            landed.data.ptr,
            node,
            memory.ptrs[move.peer] + a * itemsize,
            move.peer,
            (b - a) * itemsize,
            stream,
        )
        source = landed if move.accumulate else None
    if source is not None:
        if move.accumulate:
            reduce(target, source, stream)
        else:
            runtime = comm._runtime
            runtime.memcpyAsync(
                target.data.ptr,
                source.data.ptr,
                (b - a) * itemsize,
                runtime.memcpyDeviceToDevice,
                stream.ptr,
            )
    if average and move.completes and not move.to_scratch:
        with stream:
            divide_by_nodes(target, comm.nodes, comm._cp, memory.landing[node])
