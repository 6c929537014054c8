"""A plan read by position: the operations each element goes through, in the plan's order.

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
:class:`ring.CpuCommunicator`'s ``executor="slices"`` runs plans this way.
"""

from __future__ import annotations

import bisect
from functools import lru_cache
from typing import NamedTuple

from ..schedule import Plan
from ..schedule.steps import Move

__all__ = ["ByPosition", "Op", "Segment", "by_position"]


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
    """The plan's :class:`Segment` s, or None where its scratch does not keep positions."""
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
