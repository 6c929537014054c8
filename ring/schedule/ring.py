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
from typing import cast

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
    span,
)

__all__ = [
    "Phase",
    "RingSchedule",
    "Transfer",
    "cache_bytes",
    "owned_chunk",
    "ring_chunk",
    "ring_family_steps",
    "ring_schedule",
]


def ring_chunk(phase: PhaseName, step: int, node: int, nodes: int, direction: int = 1) -> int:
    """The chunk ``node`` receives at ``step`` of ``phase``: the ring's arithmetic, the one
    place it lives (the backends run it through :func:`ring_family_steps`).

    On the right-going ring (``direction`` 1) node ``i`` receives from ``i - 1``: chunk
    ``i - 1 - s`` in reduce-scatter, ``i - s`` in all-gather.  The left-going ring of
    ``ring-bidirectional`` (``direction`` -1) receives from ``i + 1`` and mirrors it so that
    node ``i`` still completes chunk ``i + 1``: ``i + s + 3`` and ``i + s + 2``."""
    if direction > 0:
        return (node - step - (1 if phase == REDUCE_SCATTER else 0)) % nodes
    return (node + step + (3 if phase == REDUCE_SCATTER else 2)) % nodes


def owned_chunk(node: int, nodes: int) -> int:
    """The chunk that ``node`` holds fully reduced after reduce-scatter: the one it
    receives at the last step (every algorithm keeps this ownership)."""
    # The plan builders' calls pass plain valid ints: only anything else is checked.
    if not (type(node) is int and type(nodes) is int and 0 <= node < nodes):
        node = check_int("node", node)
        nodes = check_int("nodes", nodes, 1)
        if not 0 <= node < nodes:
            raise ValueError(f"node must be in [0, {nodes}), got {node}")
    return ring_chunk(REDUCE_SCATTER, nodes - 2, node, nodes)


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
    """The plain ring on ``nodes`` nodes, chunk by chunk: read off the steps the backends
    run (:func:`ring_family_steps`) for a buffer of one element per chunk, where a move's
    range is its chunk.

    One node's steps (:meth:`for_node`) take O(N) work; the full per-step tables
    (:attr:`phases`, N · 2(N - 1) transfers) are built on first use, for the checks that
    read the whole schedule.
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

    def transfer(self, phase: PhaseName, step: int, node: int) -> Transfer:
        """What ``node`` does at ``step`` of ``phase``."""
        return _transfers(self.nodes, node)[phase][step]

    def for_node(self, node: int, phases: tuple[PhaseName, ...]) -> tuple[Transfer, ...]:
        """Everything ``node`` does, in order, for the requested phases."""
        mine = _transfers(self.nodes, node)
        return tuple(
            t for phase in (REDUCE_SCATTER, ALL_GATHER) if phase in phases for t in mine[phase]
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


@lru_cache(maxsize=1024)
def _transfers(nodes: int, node: int) -> dict[str, tuple[Transfer, ...]]:
    """Per phase, ``node``'s transfers: its allreduce steps on one element per chunk."""
    steps = ring_family_steps("ring", "allreduce", nodes, nodes, node, 1) if nodes > 1 else ()
    transfers: dict[str, list[Transfer]] = {REDUCE_SCATTER: [], ALL_GATHER: []}
    for step in steps:
        (move,) = step.moves
        phase = cast(PhaseName, step.phase)
        transfers[phase].append(
            Transfer(phase, step.number, node, move.peer, move.dst[0], move.accumulate)
        )
    return {phase: tuple(ts) for phase, ts in transfers.items()}


@lru_cache(maxsize=16)
def _pieces(length: int, nodes: int, cuts: int) -> tuple[tuple[Range, ...], ...]:
    """How the ring family cuts a buffer: ``pieces[k][chunk]``, the elements cut ``k`` of
    ``cuts`` moves of that chunk (``blocks`` ring passes one after another, each moving one
    piece of every chunk per direction: cut ``block * lanes + lane``).  The same for every
    node of a plan, so made once per plan, not once per node."""
    per_chunk = [
        [(a + lo, a + hi) for lo, hi in (span(b - a, cuts, k) for k in range(cuts))]
        for a, b in chunk_bounds(length, nodes)
    ]
    return tuple(tuple(ranges[k] for ranges in per_chunk) for k in range(cuts))


def ring_family_steps(
    algorithm: str, collective: str, nodes: int, length: int, node: int, blocks: int
) -> tuple[Step, ...]:
    """Every step of ``node`` for an algorithm of the ring family (``blocks`` ring passes
    for ``ring-segmented``, else 1)."""
    n = nodes
    directions = (1, -1) if algorithm == "ring-bidirectional" else (1,)
    pieces = _pieces(length, n, blocks * len(directions))
    neighbour = {1: (node - 1) % n, -1: (node + 1) % n}
    # The left-going ring needs both neighbours done; the ring alone needs only its left
    # one (see ring.cpu.crew for why that suffices).
    waits = tuple(dict.fromkeys(neighbour[d] for d in directions))
    steps: list[Step] = []
    for block in range(blocks):
        for phase in COLLECTIVE_PHASES[collective]:
            accumulate = phase == REDUCE_SCATTER
            for s in range(n - 1):
                moves, sends = [], []
                for lane, d in enumerate(directions):
                    ranges = pieces[block * len(directions) + lane]
                    got = ranges[ring_chunk(phase, s, node, n, d)]
                    moves.append(
                        Move(neighbour[d], got, got, accumulate, accumulate and s == n - 2)
                    )
                    taker = neighbour[-d]
                    sends.append(Send(taker, ranges[ring_chunk(phase, s, taker, n, d)]))
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
