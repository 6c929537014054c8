"""The ring family: the plain ring's arithmetic, and its segmented and bidirectional forms.

Node ``i`` always receives from its left neighbour ``i - 1`` (mod N).  Reduce-scatter
takes N - 1 steps: at step ``s`` node ``i`` accumulates chunk ``(i - 1 - s) mod N`` of its
left neighbour into its own copy.  After that, chunk ``c`` is complete on node ``c - 1``,
so node ``i`` owns chunk ``(i + 1) mod N``.  All-gather takes N - 1 more steps: at step
``s`` node ``i`` copies chunk ``(i - s) mod N``, which its left neighbour finished
either in reduce-scatter (s = 0) or in the previous all-gather step.

The family's steps are computed per node in closed form (O(N) work for one node), so a
plan for 1024 nodes never builds the whole table:

* ``ring-segmented`` cuts every chunk into the same number of pieces and runs one full
  ring pass per piece index (a block of about ``segment`` elements), so the data a node
  writes is read by its neighbour while it is still in cache;
* ``ring-bidirectional`` sends the first half of every chunk around the ring to the right
  and the second half around a ring to the left, at the same steps.

Both keep the chunk each node owns, so their reduce-scatter means what the ring's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from ..machine import cache_bytes
from .steps import (
    ALL_GATHER,
    COLLECTIVE_PHASES,
    REDUCE_SCATTER,
    Move,
    PhaseName,
    Range,
    Send,
    Step,
    check_int,
    chunk_bounds,
    chunk_range,
)

__all__ = [
    "Phase",
    "RingSchedule",
    "Transfer",
    "cache_bytes",
    "ring_family_steps",
    "ring_schedule",
]


@dataclass(frozen=True, slots=True)
class Transfer:
    """One scheduled move: ``node`` takes ``chunk`` from ``src`` (its left neighbour)
    and accumulates it (reduce-scatter) or copies it over its own (all-gather)."""

    phase: PhaseName
    step: int
    node: int
    src: int
    chunk: int
    accumulate: bool

    @property
    def name(self) -> str:
        """The NVTX range name of this step on this node (see :mod:`ring.nvtx`)."""
        return f"{self.phase} step {self.step} node {self.node}"


@dataclass(frozen=True, slots=True)
class Phase:
    name: PhaseName
    # steps[s][i] is what node i does at step s of this phase.
    steps: tuple[tuple[Transfer, ...], ...]


@dataclass(frozen=True)
class RingSchedule:
    """The schedule for ``nodes`` nodes.

    One node's steps (:meth:`for_node`) are computed directly, so a backend that needs only
    its own node's steps does O(N) work; the full per-step tables (:attr:`phases`, N · 2(N - 1)
    transfers) are built on first use, for the checks that read the whole schedule.
    """

    nodes: int

    @cached_property
    def reduce_scatter(self) -> Phase:
        return self._phase(REDUCE_SCATTER)

    @cached_property
    def all_gather(self) -> Phase:
        return self._phase(ALL_GATHER)

    @property
    def phases(self) -> tuple[Phase, Phase]:
        return (self.reduce_scatter, self.all_gather)

    def left(self, node: int) -> int:
        """The neighbour ``node`` receives from."""
        return (node - 1) % self.nodes

    def right(self, node: int) -> int:
        """The neighbour ``node`` sends to."""
        return (node + 1) % self.nodes

    def shift(self, phase: PhaseName, step: int) -> int:
        """At ``step`` of ``phase`` every node ``i`` takes chunk ``(i + shift) mod N`` from its
        left neighbour: the ring is the same at every node up to rotation, which lets a backend
        keep one O(N) plan for all nodes.  The one place the ring's arithmetic lives."""
        return -step - (1 if phase == REDUCE_SCATTER else 0)

    def transfer(self, phase: PhaseName, step: int, node: int) -> Transfer:
        """What ``node`` does at ``step`` of ``phase``."""
        return Transfer(
            phase=phase,
            step=step,
            node=node,
            src=self.left(node),
            chunk=(node + self.shift(phase, step)) % self.nodes,
            accumulate=phase == REDUCE_SCATTER,
        )

    def for_node(self, node: int, phases: tuple[PhaseName, ...]) -> tuple[Transfer, ...]:
        """Everything ``node`` does, in order, for the requested phases."""
        return tuple(
            self.transfer(phase, s, node)
            for phase in (REDUCE_SCATTER, ALL_GATHER)
            if phase in phases
            for s in range(self.nodes - 1)
        )

    def _phase(self, name: PhaseName) -> Phase:
        n = self.nodes
        steps = tuple(tuple(self.transfer(name, s, i) for i in range(n)) for s in range(n - 1))
        return Phase(name, steps)


@lru_cache(maxsize=256)
def ring_schedule(nodes: int) -> RingSchedule:
    """The complete schedule for ``nodes`` nodes (empty phases when ``nodes == 1``)."""
    nodes = check_int("nodes", nodes, 1)
    return RingSchedule(nodes=nodes)


# (direction, chunk offset) of the chunk a node receives at step s of a phase, and of the
# chunk its receiver takes from it: the right-going ring's arithmetic is RingSchedule's;
# the left-going ring receives from i + 1 and mirrors it so that node i still completes
# chunk i + 1 (RS: chunk i + s + 3; AG: chunk i + s + 2).
def _lane_chunk(direction: int, phase: PhaseName, node: int, s: int, n: int) -> int:
    if direction > 0:
        return (node - s - (1 if phase == REDUCE_SCATTER else 0)) % n
    return (node + s + (3 if phase == REDUCE_SCATTER else 2)) % n


@dataclass(frozen=True)
class _Lanes:
    """How the ring family cuts a buffer: ``blocks`` ring passes one after another, each
    moving ``lanes`` pieces of every chunk at once (one per direction)."""

    length: int
    nodes: int
    blocks: int
    directions: tuple[int, ...]

    @cached_property
    def pieces(self) -> tuple[tuple[Range, ...], ...]:
        """pieces[block * lanes + lane][chunk]: the elements that lane moves of that chunk."""
        cuts = self.blocks * len(self.directions)
        per_chunk = [
            [(a + lo, a + hi) for lo, hi in (chunk_range(b - a, cuts, k) for k in range(cuts))]
            for a, b in chunk_bounds(self.length, self.nodes)
        ]
        return tuple(tuple(ranges[k] for ranges in per_chunk) for k in range(cuts))


def ring_family_steps(
    algorithm: str, collective: str, nodes: int, length: int, node: int, blocks: int
) -> tuple[Step, ...]:
    """Every step of ``node`` for an algorithm of the ring family (``blocks`` ring passes
    for ``ring-segmented``, else 1)."""
    n = nodes
    directions = (1, -1) if algorithm == "ring-bidirectional" else (1,)
    lanes = _Lanes(length, n, blocks, directions)
    pieces = lanes.pieces
    neighbour = {1: (node - 1) % n, -1: (node + 1) % n}
    # The left-going ring needs both neighbours done; the ring alone needs only its left
    # one (see ring.cpu.sync for why that suffices).
    waits = tuple(dict.fromkeys(neighbour[d] for d in directions))
    steps: list[Step] = []
    for block in range(blocks):
        for phase in COLLECTIVE_PHASES[collective]:
            accumulate = phase == REDUCE_SCATTER
            for s in range(n - 1):
                moves, sends = [], []
                for lane, d in enumerate(directions):
                    ranges = pieces[block * len(directions) + lane]
                    got = ranges[_lane_chunk(d, phase, node, s, n)]
                    moves.append(
                        Move(neighbour[d], got, got, accumulate, accumulate and s == n - 2)
                    )
                    taker = neighbour[-d]
                    sends.append(Send(taker, ranges[_lane_chunk(d, phase, taker, s, n)]))
                number = block * (n - 1) + s
                # Blocks touch disjoint ranges, so a block's first step waits for no one:
                # a node may start block k + 1 while its neighbour still finishes block k.
                # It cannot get further ahead: its next step waits for that neighbour's
                # first step of block k + 1.
                started = s > 0 or phase != COLLECTIVE_PHASES[collective][0]
                steps.append(
                    Step(
                        algorithm,
                        phase,
                        number,
                        node,
                        tuple(moves),
                        tuple(sends),
                        waits if started else (),
                    )
                )
    return tuple(steps)
