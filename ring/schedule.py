"""The ring schedule: computed once here, executed by every backend.

Node ``i`` always receives from its left neighbour ``i - 1`` (mod N).  Reduce-scatter
takes N - 1 steps: at step ``s`` node ``i`` accumulates chunk ``(i - 1 - s) mod N`` of its
left neighbour into its own copy.  After that, chunk ``c`` is complete on node ``c - 1``,
so node ``i`` owns chunk ``(i + 1) mod N``.  All-gather takes N - 1 more steps: at step
``s`` node ``i`` copies chunk ``(i - s) mod N``, which its left neighbour finished
either in reduce-scatter (s = 0) or in the previous all-gather step.

Backends never redo this arithmetic.  :func:`plan` turns it into what one call needs: for
a collective, a node count and a buffer length, every node's :class:`Step` list, with the
element ranges already cut (:func:`chunk_bounds`, the one cache of chunk boundaries).  A
step names a peer and an element range on each side (what arrives, from whom; what leaves,
to whom) and whether the arriving range is accumulated or copied, so any algorithm that
moves ranges between nodes fits it; the threaded, CUDA and MPI backends execute nothing
else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Literal, NamedTuple

__all__ = [
    "ALL_GATHER",
    "COLLECTIVES",
    "COLLECTIVE_PHASES",
    "REDUCE_SCATTER",
    "Phase",
    "Plan",
    "RingSchedule",
    "Step",
    "Transfer",
    "check_collective",
    "chunk_bounds",
    "chunk_range",
    "owned_chunk",
    "plan",
    "ring_schedule",
]

REDUCE_SCATTER: Literal["reduce_scatter"] = "reduce_scatter"
ALL_GATHER: Literal["all_gather"] = "all_gather"
PhaseName = Literal["reduce_scatter", "all_gather"]

# Which schedule phases each collective runs.
COLLECTIVE_PHASES: dict[str, tuple[PhaseName, ...]] = {
    "allreduce": (REDUCE_SCATTER, ALL_GATHER),
    "reduce_scatter": (REDUCE_SCATTER,),
    "all_gather": (ALL_GATHER,),
}
COLLECTIVES = tuple(COLLECTIVE_PHASES)


def _check_int(name: str, value: object, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    number = value.__index__()
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def chunk_range(total: int, num_chunks: int, index: int) -> tuple[int, int]:
    """Element range ``[start, stop)`` of chunk ``index`` when ``total`` elements are
    split into ``num_chunks`` pieces that differ in length by at most one.

    The first ``total % num_chunks`` chunks hold one extra element; when ``total`` is
    smaller than ``num_chunks`` the trailing chunks are empty.
    """
    total = _check_int("total", total, 0)
    num_chunks = _check_int("num_chunks", num_chunks, 1)
    index = _check_int("index", index)
    if not 0 <= index < num_chunks:
        raise ValueError(f"index must be in [0, {num_chunks}), got {index}")
    base, extra = divmod(total, num_chunks)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def owned_chunk(node: int, nodes: int) -> int:
    """The chunk that ``node`` holds fully reduced after reduce-scatter."""
    node = _check_int("node", node)
    nodes = _check_int("nodes", nodes, 1)
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
    nodes = _check_int("nodes", nodes, 1)
    return RingSchedule(nodes=nodes)


def check_collective(name: object) -> str:
    if not isinstance(name, str) or name not in COLLECTIVE_PHASES:
        raise ValueError(f"unknown collective {name!r}: expected one of {', '.join(COLLECTIVES)}")
    return name


@lru_cache(maxsize=1024)
def chunk_bounds(length: int, nodes: int) -> tuple[tuple[int, int], ...]:
    """:func:`chunk_range` of every chunk, cached because calls repeat the same sizes."""
    return tuple(chunk_range(length, nodes, c) for c in range(nodes))


class Step(NamedTuple):
    """What one node does at one step of a collective.

    It receives the elements ``recv = (start, stop)`` of ``recv_peer``'s buffer into the same
    elements of its own, accumulating them with the op (``accumulate``) or copying them over
    its own, and at the same step ``send_peer`` receives this node's elements ``send``.
    Element ``j`` of every node's buffer is the same element of the collective, so a range
    names the same offsets on both sides; a backend that lands data in scratch first (a CUDA
    peer copy, an MPI receive) does so by its own choice.  ``completes`` marks the step
    after which ``recv`` holds the full reduction on this node (the last reduce-scatter step
    of the ring), where an op that finishes the reduction (``avg``) applies its last touch.
    A shared-memory backend only reads the receiving side; a message-passing one pairs the
    two.  (A tuple, not a dataclass: a plan for 1024 nodes has two million of them.)
    """

    phase: PhaseName
    number: int  # the step's number within its phase
    node: int
    recv_peer: int
    recv: tuple[int, int]
    send_peer: int
    send: tuple[int, int]
    accumulate: bool
    completes: bool

    @property
    def name(self) -> str:
        """The NVTX range name of this step on this node (see :mod:`ring.nvtx_ranges`)."""
        return f"{self.phase} step {self.number} node {self.node}"


# Plans for up to this many nodes keep every node's steps once computed (64 nodes: 8,064
# steps); larger ones compute a node's steps on each request, so state stays linear in N.
CACHED_NODES = 64


@dataclass(frozen=True)
class Plan:
    """Every node's steps for one collective on ``nodes`` buffers of ``length`` elements.

    All nodes take the same number of steps (:attr:`steps`), and step ``t`` of one node
    depends only on steps ``< t`` of others: backends run step ``t`` of every node after
    the step ``t - 1`` it reads from (see :mod:`ring.cpu` for why that suffices).
    """

    collective: str
    nodes: int
    length: int
    _cache: dict[int, tuple[Step, ...]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def steps(self) -> int:
        return len(COLLECTIVE_PHASES[self.collective]) * (self.nodes - 1)

    @property
    def scratch_elements(self) -> int:
        """The longest range any node receives in one step: what a backend that receives
        into scratch before accumulating must hold."""
        start, stop = chunk_bounds(self.length, self.nodes)[0]
        return stop - start

    def node_steps(self, node: int) -> tuple[Step, ...]:
        """Everything ``node`` does, in order."""
        steps = self._cache.get(node)
        if steps is None:
            steps = self._build(node)
            if self.nodes <= CACHED_NODES:
                self._cache[node] = steps
        return steps

    def _build(self, node: int) -> tuple[Step, ...]:
        n = self.nodes
        schedule = ring_schedule(n)
        bounds = chunk_bounds(self.length, n)
        left, right = schedule.left(node), schedule.right(node)
        last = n - 2
        return tuple(
            Step(
                phase,
                s,
                node,
                left,
                bounds[(node + schedule.shift(phase, s)) % n],
                right,
                # What the right neighbour takes from us: its own transfer at this step.
                bounds[(right + schedule.shift(phase, s)) % n],
                phase == REDUCE_SCATTER,
                phase == REDUCE_SCATTER and s == last,
            )
            for phase in COLLECTIVE_PHASES[self.collective]
            for s in range(n - 1)
        )


@lru_cache(maxsize=32, typed=True)
def plan(collective: str, nodes: int, length: int) -> Plan:
    """The steps of ``collective`` on ``nodes`` buffers of ``length`` elements (none when
    ``nodes == 1``): what every backend executes."""
    check_collective(collective)
    return Plan(collective, _check_int("nodes", nodes, 1), _check_int("length", length, 0))
