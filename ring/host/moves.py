"""How a node applies one step's moves to the arrays: what a CPU worker does at each step,
what the calling thread does for every node in turn inline, and what a bound inline call
keeps (:mod:`ring.host.bound`).

A step whose moves all accumulate into one range (``direct`` reduces its chunk from every
peer in one step, ``reduce-broadcast`` node 0 the whole buffer) runs tile by tile: every
peer's tile is added while the target tile is still in the core's cache, so the target
crosses the memory bus once instead of once per peer.  Each element still sees the same
operations in the same order, so the result is bit for bit the untiled one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..schedule.steps import Move, Range, Step
from .slices import ACCUMULATE, apply, kind

__all__ = ["Tiled", "inline_steps", "move_operations", "run_moves", "run_ranged", "tiled_moves"]


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
    :func:`ring.host.slices.apply`: (its kind, destination, source, divide by N after)."""
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
