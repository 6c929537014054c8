"""The ring schedule: computed once here, executed by every backend.

Node ``i`` always receives from its left neighbour ``i - 1`` (mod N).  Reduce-scatter
takes N - 1 steps: at step ``s`` node ``i`` accumulates chunk ``(i - 1 - s) mod N`` of its
left neighbour into its own copy.  After that, chunk ``c`` is complete on node ``c - 1``,
so node ``i`` owns chunk ``(i + 1) mod N``.  All-gather takes N - 1 more steps: at step
``s`` node ``i`` copies chunk ``(i - s) mod N``, which its left neighbour finished
either in reduce-scatter (s = 0) or in the previous all-gather step.

Backends never redo this arithmetic: they iterate over :func:`ring_schedule` and ask
:func:`chunk_range` for element boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal

__all__ = [
    "ALL_GATHER",
    "REDUCE_SCATTER",
    "Phase",
    "RingSchedule",
    "Transfer",
    "chunk_range",
    "owned_chunk",
    "ring_schedule",
]

REDUCE_SCATTER = "reduce_scatter"
ALL_GATHER = "all_gather"
PhaseName = Literal["reduce_scatter", "all_gather"]


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    return value.__index__()  # type: ignore[union-attr]


def chunk_range(total: int, num_chunks: int, index: int) -> tuple[int, int]:
    """Element range ``[start, stop)`` of chunk ``index`` when ``total`` elements are
    split into ``num_chunks`` pieces that differ in length by at most one.

    The first ``total % num_chunks`` chunks hold one extra element; when ``total`` is
    smaller than ``num_chunks`` the trailing chunks are empty.
    """
    total = _check_int("total", total)
    num_chunks = _check_int("num_chunks", num_chunks)
    index = _check_int("index", index)
    if num_chunks < 1:
        raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total}")
    if not 0 <= index < num_chunks:
        raise ValueError(f"index must be in [0, {num_chunks}), got {index}")
    base, extra = divmod(total, num_chunks)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def owned_chunk(node: int, nodes: int) -> int:
    """The chunk that ``node`` holds fully reduced after reduce-scatter."""
    node = _check_int("node", node)
    nodes = _check_int("nodes", nodes)
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    if not 0 <= node < nodes:
        raise ValueError(f"node must be in [0, {nodes}), got {node}")
    return (node + 1) % nodes


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
        """The NVTX range name of this step on this node (see :mod:`ring.nvtx_ranges`)."""
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
    nodes = _check_int("nodes", nodes)
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    return RingSchedule(nodes=nodes)
