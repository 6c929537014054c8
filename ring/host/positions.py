"""A plan read and run by position: the operations each element goes through, in the plan's
order, and the slices of positions that threads run tile by tile.

Element ``j`` of every buffer is element ``j`` of the collective (moves between buffers
have ``src == dst``, :mod:`ring.schedule.steps`), so what a plan does to element ``j`` never
involves another element.  The positions therefore fall into runs (:class:`Segment`) over
which one list of operations (:class:`Op`) applies: each run is the plan restricted to those
positions, every step in order, and within a step every node's moves in order.  Scratch
fits when each scratch element a node reads was written from the position it is read back
to (recursive doubling parks a peer's whole buffer at offset 0 and adds it back in place):
then a node's scratch is one more slot of the position.

Running the runs in any order, cut into tiles, or split between threads that each take
some positions, applies to every element the plan's operations in the plan's order: bit
for bit the result of running the plan step by step, node by node.  (Within a step no node
reads what another writes at that step, so the order of nodes within a step is free.)

That is the CPU backend's ``executor="slices"`` (and MPI's calls on shared buffers): each of
``parts`` threads (the caller and ``parts - 1`` of the communicator's workers) takes one
slice of the positions and applies to it, tile by tile, every node's operations in the
plan's order.  A tile of every buffer stays in the core's cache while all its operations
run, so memory sees each input read once and each result written once (the 2N·S of a
hand-written shared-memory reduction), and no thread waits for another until the call ends.
"""

from __future__ import annotations

import bisect
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ..machine import cache_bytes
from ..ops import apply, kind
from ..schedule import Plan, chunk_offsets, unit_probe
from ..schedule.steps import Move

__all__ = [
    "ByPosition",
    "Op",
    "Segment",
    "SliceJob",
    "by_position",
    "run_slice",
    "scratch_slots",
    "slice_bounds",
    "tile_bytes",
    "tile_elements",
    "tile_operations",
]


class Op(NamedTuple):
    """One move at one position: ``node`` accumulates (or copies) what ``peer`` holds
    there into its own buffer, or from or into its own scratch slot of the position."""

    node: int
    peer: int
    accumulate: bool
    completes: bool
    from_scratch: bool
    to_scratch: bool
    source_first: bool


class Segment(NamedTuple):
    """Positions ``[start, stop)``, every one of which goes through ``ops`` in order."""

    start: int
    stop: int
    ops: tuple[Op, ...]


class ByPosition(NamedTuple):
    segments: tuple[Segment, ...]
    uses_scratch: bool


class _Offsets:
    """Which value an interval holds: ``(lo, hi, value)`` runs, later writes on top."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, int, int]] = []

    def write(self, lo: int, hi: int, value: int) -> None:
        kept = []
        for a, b, v in self.runs:
            if b <= lo or a >= hi:
                kept.append((a, b, v))
                continue
            if a < lo:
                kept.append((a, lo, v))
            if b > hi:
                kept.append((hi, b, v))
        kept.append((lo, hi, value))
        self.runs = kept

    def uniform(self, lo: int, hi: int) -> int | None:
        """The one value all of ``[lo, hi)`` holds, or None (mixed or never written)."""
        covered, value = 0, None  # type: tuple[int, int | None]
        for a, b, v in self.runs:
            if b <= lo or a >= hi:
                continue
            if value is not None and v != value:
                return None
            value, covered = v, covered + min(b, hi) - max(a, lo)
        return value if covered == hi - lo else None


class _Scratch:
    """One node's scratch as the plan uses it: per offset, the shift to its position;
    per position, the shift its slot was last written at."""

    def __init__(self) -> None:
        self.shift_at = _Offsets()
        self.slot_shift = _Offsets()

    def position_of_read(self, lo: int, hi: int) -> int | None:
        shift = self.shift_at.uniform(lo, hi)
        if shift is None or self.slot_shift.uniform(lo - shift, hi - shift) != shift:
            return None  # the slot no longer holds what this offset holds
        return lo - shift

    def write(self, lo: int, hi: int, position: int) -> None:
        shift = lo - position
        self.shift_at.write(lo, hi, shift)
        self.slot_shift.write(position, position + hi - lo, shift)


def _position(move: Move, node: int, scratch: list[_Scratch]) -> int | None:
    """The first position ``move`` touches, or None if the plan cannot be read by position."""
    (a, b), (c, d) = move.src, move.dst
    start = scratch[node].position_of_read(a, b) if move.from_scratch else a
    if start is None:
        return None
    if move.to_scratch:
        scratch[node].write(c, d, start)
    elif c != start:
        return None
    return start


@lru_cache(maxsize=64)
def by_position(plan: Plan) -> ByPosition | None:
    """The plan's :class:`Segment` s, or None where its scratch does not keep positions;
    where the plan has a unit (:attr:`ring.schedule.Plan.unit`), the unit's with their
    ends moved (:func:`_unit_maps` checks that this gives what reading the plan does)."""
    unit = plan.unit
    if unit is not None and _unit_maps(unit):
        return _mapped(by_position(unit), chunk_offsets(plan.length, plan.nodes))
    return _read(plan)


def _mapped(placed: ByPosition | None, offsets: tuple[int, ...]) -> ByPosition | None:
    """``placed``'s segments with each end ``k`` moved to ``offsets[k]``."""
    if placed is None:
        return None
    segments = tuple(Segment(offsets[a], offsets[b], ops) for a, b, ops in placed.segments)
    return ByPosition(segments, placed.uses_scratch)


@lru_cache(maxsize=256)
def _unit_maps(unit: Plan) -> bool:
    """Whether ``unit``'s segments, mapped, are those read from its probe
    (:func:`ring.schedule.plans.unit_probe`): a scratch whose offsets follow the
    positions by a shift would not map."""
    probe = unit_probe(unit)
    return _mapped(_read(unit), chunk_offsets(probe.length, unit.nodes)) == _read(probe)


def _read(plan: Plan) -> ByPosition | None:
    """:func:`by_position` read from the plan's moves."""
    n = plan.nodes
    scratch = [_Scratch() for _ in range(n)]
    placed: list[tuple[int, int, Op]] = []  # (start, stop, op) in the plan's order
    steps = [plan.node_steps(node) for node in range(n)]
    for t in range(plan.steps):
        for node in range(n):
            for move in steps[node][t].moves:
                start = _position(move, node, scratch)
                if start is None:
                    return None
                stop = start + move.dst[1] - move.dst[0]
                if stop > start:
                    op = Op(node, move.peer, *move[3:])
                    placed.append((start, stop, op))
    return ByPosition(_segments(placed, plan.length), plan.uses_scratch)


def _segments(placed: list[tuple[int, int, Op]], length: int) -> tuple[Segment, ...]:
    cuts = sorted({0, length, *(p for start, stop, _ in placed for p in (start, stop))})
    ops: list[list[Op]] = [[] for _ in cuts[:-1]]
    for start, stop, op in placed:
        for i in range(bisect.bisect_left(cuts, start), bisect.bisect_left(cuts, stop)):
            ops[i].append(op)
    runs = zip(cuts, cuts[1:], ops, strict=False)  # ops: one shorter than cuts
    return tuple(Segment(lo, hi, tuple(run)) for lo, hi, run in runs if run)


def tile_bytes() -> int:
    """Bytes of one tile of a tiled step: a quarter of the per-core L2, so the target
    tile and the source streaming past it stay in it (16 KiB at least)."""
    return max(16 << 10, cache_bytes()[0] // 4)


def tile_elements(dtype: np.dtype) -> int:
    """Elements of ``dtype`` in one tile (:func:`tile_bytes`)."""
    return max(1, tile_bytes() // dtype.itemsize)


class SliceJob(NamedTuple):
    buffers: list
    ufunc: Any
    average: bool
    plan: ByPosition
    bounds: list[tuple[int, int]]  # per part: its positions
    tile: int  # positions per tile
    scratch: list  # per part: each node's scratch slots for one tile (or None)
    finished: Any  # itertools.count: workers done with this call
    workers: int  # parts run by workers (all but the caller's)


def slice_bounds(length: int, parts: int, tile: int) -> list[tuple[int, int]]:
    """``parts`` slices of ``[0, length)``, cut at whole tiles so no tile is split."""
    tiles = -(-length // tile)
    cuts = [min(length, tile * (tiles * p // parts)) for p in range(parts + 1)]
    return [(cuts[p], cuts[p + 1]) for p in range(parts)]


def scratch_slots(parts: int, nodes: int, tile: int, dtype: np.dtype) -> list:
    """Per part, one tile of scratch per node."""
    return [[np.empty(tile, dtype) for _ in range(nodes)] for _ in range(parts)]


def tile_operations(
    plan: ByPosition, lo: int, hi: int, tile: int, buffers: list, slots, average: bool
):
    """Per tile of positions ``[lo, hi)``, in the plan's order: its operations on views of
    ``buffers`` (and of ``slots``, each node's scratch tile, where the plan uses scratch) as
    (:func:`kind`, destination, source, divide by N after)."""
    for start, stop, ops in plan.segments:
        a, b = max(start, lo), min(stop, hi)
        for t0 in range(a, b, tile):
            t1 = min(t0 + tile, b)
            views = [buffer[t0:t1] for buffer in buffers]
            own = [slot[: t1 - t0] for slot in slots] if slots else views
            yield [
                (
                    kind(accumulate, first),
                    own[node] if to_scratch else views[node],
                    own[node] if from_scratch else views[peer],
                    accumulate and completes and average,
                )
                for node, peer, accumulate, completes, from_scratch, to_scratch, first in ops
            ]


def run_slice(job: SliceJob, part: int, stopped) -> None:
    """Apply the plan to ``part``'s positions; ``stopped()`` is asked before each tile, and
    when it says another thread failed the slice raises ``stopped.error``."""
    lo, hi = job.bounds[part]
    slots = job.scratch[part] if job.plan.uses_scratch else None
    tiles = tile_operations(job.plan, lo, hi, job.tile, job.buffers, slots, job.average)
    for operations in tiles:
        stopped()
        apply(operations, job.ufunc, len(job.buffers))
