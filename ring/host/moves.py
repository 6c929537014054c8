"""A plan run on the arrays by node and step, and a repeated call bound to its buffers.

What a CPU worker does at each step, what the calling thread does for every node in turn
inline, and what MPI's ranks do on shared buffers: each move becomes an operation of
:func:`ring.ops.apply` on views of the arrays.  A step whose moves all accumulate into one
range (``direct`` reduces its chunk from every peer in one step, ``reduce-broadcast`` node 0
the whole buffer) runs tile by tile: every peer's tile is added while the target tile is
still in the core's cache, so the target crosses the memory bus once instead of once per
peer.  Each element still sees the same operations in the same order, so the result is bit
for bit the untiled one.

A call of at most ``inline_bytes`` per node runs on the calling thread, where at small
sizes its cost is Python's: the buffers' checks, the plan's look-ups and a view per
operation.  When a call repeats on the same buffer objects (a training loop's gradient
buckets, a benchmark's timed calls) none of that changes.  :class:`Bound` keeps the list
of (operation, destination view, source view) that the plan gives for those buffers, and
a call that :meth:`Bound.takes` (the same list of the same objects, each with the dtype,
strides and writeable flag it had, and the same op) runs that list and nothing else.
A bound call holds a weak reference to each buffer, which makes NumPy refuse to resize it
(even with ``refcheck=False``): the views would otherwise point at freed memory.

By slices (:func:`bind`) the list is :func:`ring.host.positions.tile_operations` over every
position, what :func:`ring.host.positions.run_slice` runs on one slice, in the same order.
By nodes (:func:`bind_steps`) it is what :meth:`ring.cpu.crew.Crew.run_inline` runs, step by
step and node after node (:func:`inline_steps`), each node's step inside its NVTX range,
which the profiles read.  Either way the result is bit for bit the unbound call's.  The
views keep the buffers alive until the next call of that collective on other buffers, or
until the communicator closes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import lru_cache, partial
from typing import Any, NamedTuple

import numpy as np

from ..ops import ACCUMULATE, apply, kind
from ..schedule import RING_FAMILY, Plan
from ..schedule.steps import Move, Range, Step
from .positions import ByPosition, tile_operations

__all__ = [
    "BOUND_MOVES",
    "Bound",
    "Tiled",
    "bind",
    "bind_run",
    "bind_steps",
    "bindable",
    "inline_steps",
    "move_operations",
    "run_moves",
    "run_ranged",
    "tiled_moves",
]


class Tiled(NamedTuple):
    """Moves of one step that all accumulate into ``dst``, run tile by tile: ``sources``
    are (peer, first element of its range, from_scratch) in the plan's order."""

    dst: Range
    to_scratch: bool
    sources: tuple[tuple[int, int, bool], ...]
    completes: bool


def _joins(group: list[Move], move: Move, node: int) -> bool:
    """Whether ``move`` can run in the same tiles as ``group``: same target, and it neither
    reads that target nor follows a move that completes it."""
    first = group[0]
    reads_target = move.from_scratch if move.to_scratch else move.peer == node
    return (
        move.accumulate
        and not (move.source_first or first.source_first)
        and move.dst == first.dst
        and move.to_scratch == first.to_scratch
        and not reads_target
        and not group[-1].completes
    )


def tiled_moves(step: Step) -> tuple:
    """``step.moves`` with each run of two or more moves into one range as a :class:`Tiled`."""
    groups: list[list[Move]] = []
    for move in step.moves:
        if groups and groups[-1][0].accumulate and _joins(groups[-1], move, step.node):
            groups[-1].append(move)
        else:
            groups.append([move])
    if all(len(g) == 1 for g in groups):
        return step.moves
    return tuple(
        g[0]
        if len(g) == 1
        else Tiled(
            g[0].dst,
            g[0].to_scratch,
            tuple((m.peer, m.src[0], m.from_scratch) for m in g),
            g[-1].completes,
        )
        for g in groups
    )


def move_operations(job: Any, node: int, moves: tuple):
    """One step's moves (and tiled runs of moves) on ``node``'s arrays of ``job`` (a
    :class:`ring.cpu.crew` job: buffers, scratch, average, tile) as the operations of
    :func:`ring.ops.apply`: (its kind, destination, source, divide by N after)."""
    buffers, average = job.buffers, job.average
    mine, own = buffers[node], job.scratch[node]
    for move in moves:
        if move.__class__ is Tiled:
            yield from _tiled(move, mine, own, job)
            continue
        peer, (a, b), (c, d), accumulate, completes, from_scratch, to_scratch, first = move
        src = (own if from_scratch else buffers[peer])[a:b]
        dst = (own if to_scratch else mine)[c:d]
        yield kind(accumulate, first), dst, src, accumulate and completes and average


def run_moves(job: Any, node: int, moves: tuple) -> None:
    """Apply one step's moves to ``node``'s arrays."""
    apply(move_operations(job, node, moves), job.ufunc, len(job.buffers))


def inline_steps(job: Any):
    """What a call run on one thread does, in order: every node's step ``t``, node after
    node, before any node's step ``t + 1``, each as (the push of the node's step range, its
    operations of :func:`move_operations`)."""
    plan = job.plan
    per_node = [
        (node, job.program[node].pushers, plan.node_steps(node), job.actions[node])
        for node in range(plan.nodes)
    ]
    for t in range(plan.steps):
        for node, pushers, steps, actions in per_node:
            moves = steps[t].moves if actions is None else actions[t]
            yield pushers[t], move_operations(job, node, moves)


def run_ranged(steps, ufunc, nodes: int, pop) -> None:
    """Apply each (push, operations) of ``steps`` in order inside its range, which ``pop``
    closes whatever happens (an exception, Ctrl-C too, propagates)."""
    for push, operations in steps:
        push()
        try:
            apply(operations, ufunc, nodes)
        finally:
            pop()


def _tiled(run: Tiled, mine, own, job: Any):
    c, d = run.dst
    target, buffers = (own if run.to_scratch else mine), job.buffers
    sources = [(own if s else buffers[peer], a - c) for peer, a, s in run.sources]
    divide, last = run.completes and job.average, len(sources) - 1
    for lo in range(c, d, job.tile):
        hi = min(lo + job.tile, d)
        out = target[lo:hi]
        for k, (array, shift) in enumerate(sources):
            yield ACCUMULATE, out, array[lo + shift : hi + shift], divide and k == last


# A call binds (ring.host.moves) only a plan of at most this many moves: binding keeps a view
# of each, and saves the Python around the moves, which only a short call notices (a ring
# on 1,024 nodes has two million moves).
BOUND_MOVES = 4096


def _most_moves(steps: Plan) -> int:
    """At least as many moves as every node's steps of ``steps`` hold, without building
    them (a ring-family plan computes a node's steps on request)."""
    if steps.algorithm in RING_FAMILY:
        return steps.steps * steps.nodes * (2 if steps.algorithm == "ring-bidirectional" else 1)
    return _table_moves(steps.unit or steps)  # as many moves as its unit


@lru_cache(maxsize=64)
def _table_moves(steps: Plan) -> int:
    return sum(len(step.moves) for node in range(steps.nodes) for step in steps.node_steps(node))


def bindable(steps: Plan) -> bool:
    """Whether a call of ``steps`` is bound: binding keeps a view per move."""
    return _most_moves(steps) <= BOUND_MOVES


class Bound(NamedTuple):
    op: str | None
    algorithm: str  # the one that ran: a call of "auto" is bound to auto's pick
    buffers: tuple
    layouts: tuple  # per buffer: (the buffer, its dtype, its strides) when bound
    ufunc: Any
    # (ring.ops.kind, destination, source, divide by N after); by nodes, per step and node
    # (push its NVTX range, its operations)
    program: tuple
    # Applies the program in order (an exception, Ctrl-C too, propagates): by slices
    # ring.ops.apply, by nodes ring.host.moves.run_ranged, with their arguments.
    run: Callable[[], None]
    generation: int = 0  # auto's (ring.planning.candidates.auto_generation) when it picked
    # One weak reference per buffer, kept while bound: NumPy refuses to resize an array
    # that has one, so the views above never outlive the memory they point at.
    pins: tuple = ()

    def takes(self, buffers: object, op: str | None) -> bool:
        """Whether a call of ``op`` on ``buffers`` is this bound call again."""
        if op != self.op or type(buffers) is not list or len(buffers) != len(self.buffers):
            return False
        # An array object's size is fixed while views of it exist (resize is refused), so
        # with its dtype and strides (their count is its ndim) unchanged so is its shape.
        # The same dtype object, not an equal one: a dtype set again in place only costs a
        # rebinding.  Each attribute read builds an object, so each is read once, in one
        # condition per buffer, and zip goes without strict (the lengths are equal).
        for buf, (mine, dtype, strides) in zip(buffers, self.layouts):  # noqa: B905
            if (
                buf is not mine
                or buf.dtype is not dtype
                or buf.strides != strides
                or not buf.flags.writeable
            ):
                return False
        return True


def bind(
    op: str | None,
    algorithm: str,
    buffers: list,
    ufunc,
    average: bool,
    positions: ByPosition,
    tile: int,
) -> Bound:
    """The operations of ``positions`` on ``buffers``, tile by tile, as views."""
    length = buffers[0].shape[0]
    scratch = []
    if positions.uses_scratch:
        scratch = [np.empty(min(tile, length), buffers[0].dtype) for _ in buffers]
    tiles = tile_operations(positions, 0, length, tile, buffers, scratch, average)
    program = tuple(operation for operations in tiles for operation in operations)
    run = partial(apply, program, ufunc, len(buffers))
    layouts = _layouts(buffers)
    return Bound(op, algorithm, tuple(buffers), layouts, ufunc, program, run, pins=_pins(buffers))


def bind_steps(op: str | None, buffers: list, ufunc, job, pop) -> Bound:
    """The inline call of a :class:`ring.cpu.crew` job bound to ``buffers``: per step,
    node after node, the push of the node's step range and its operations."""
    program = tuple((push, tuple(ops)) for push, ops in inline_steps(job))
    run = partial(run_ranged, program, ufunc, len(buffers), pop)
    layouts = _layouts(buffers)
    algorithm = job.plan.algorithm
    return Bound(op, algorithm, tuple(buffers), layouts, ufunc, program, run, pins=_pins(buffers))


def bind_run(op: str | None, algorithm: str, buffers: list, ufunc, run) -> Bound:
    """A call whose work ``run()`` does elsewhere (the workers of ring.cpu.crew) bound to
    ``buffers``: the same checks of a repeat, the same pins against a resize."""
    layouts = _layouts(buffers)
    return Bound(op, algorithm, tuple(buffers), layouts, ufunc, (), run, pins=_pins(buffers))


def _layouts(buffers: list) -> tuple:
    return tuple((b, b.dtype, b.strides) for b in buffers)


def _pins(buffers: list) -> tuple:
    return tuple(weakref.ref(b) for b in buffers)
