"""A plan: every node's steps for one call, by any algorithm, and the algorithms' names and
options.

:func:`plan` turns an algorithm into what one call needs: for a collective, a node count,
a buffer length and the algorithm's options, every node's :class:`Step` list with the
element ranges already cut (:func:`chunk_bounds`, the one cache of chunk boundaries).  The
step shape is described in :mod:`ring.schedule.steps`.  The ring family's steps are
computed per node in closed form (:mod:`ring.schedule.ring`, which holds the ring's chunk
arithmetic); the other algorithms are built as whole tables (:mod:`ring.schedule.algorithms`),
to which :attr:`Plan._table` adds each node's sends and waits.  Every algorithm keeps the
ring's ownership (after reduce-scatter node ``i`` holds chunk ``owned_chunk(i, N)`` fully
reduced), so the three collectives mean the same whichever runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

from .algorithms import TABLE_BUILDERS
from .ring import cache_bytes, ring_family_steps
from .steps import (
    COLLECTIVE_PHASES,
    COLLECTIVES,
    Move,
    Send,
    Step,
    check_collective,
    check_int,
    chunk_bounds,
    chunk_range,
)

__all__ = [
    "ALGORITHMS",
    "ALGORITHM_COLLECTIVES",
    "ALGORITHM_OPTIONS",
    "AUTO",
    "CACHED_NODES",
    "EXECUTORS",
    "RING_FAMILY",
    "Plan",
    "algorithms_of",
    "check_algorithm",
    "check_algorithm_options",
    "chunk_offsets",
    "default_group_size",
    "default_segment_bytes",
    "plan",
    "plan_for",
    "unit_probe",
]

RING_FAMILY = ("ring", "ring-segmented", "ring-bidirectional")
ALGORITHMS = (*RING_FAMILY, *TABLE_BUILDERS)
# The collectives each algorithm has (recursive doubling has no reduce-scatter of its own;
# its all-gather is Rabenseifner's second half).
ALGORITHM_COLLECTIVES = {a: COLLECTIVES for a in ALGORITHMS} | {
    "recursive-doubling": ("allreduce", "all_gather")
}


def algorithms_of(collective: str) -> tuple[str, ...]:
    """The algorithms that have ``collective``, in :data:`ALGORITHMS`' order."""
    return tuple(a for a in ALGORITHMS if collective in ALGORITHM_COLLECTIVES[a])


# How a plan runs on arrays in one memory (ring.host): node after node, each step's moves
# ("nodes"), or by position, in slices of tiles ("slices").  A cpu call's executor=, and
# part of a cpu plan in the wisdom file (ring.wisdom checks it there).
EXECUTORS = ("nodes", "slices")
# algorithm="auto": each call runs the algorithm a decision table names for its backend, N
# and size (ring.auto; ring.planning.candidates.resolve_algorithm).
AUTO = "auto"
# The options each algorithm takes through the API (a plan takes them in elements).
ALGORITHM_OPTIONS: dict[str, tuple[str, ...]] = {
    "ring-segmented": ("segment_bytes",),
    "hierarchical": ("group_size",),
}


def check_algorithm(algorithm: object, collective: str | None = None) -> str:
    """``algorithm`` if it is one (or ``auto``), and has ``collective``; else one line naming
    the choices."""
    if isinstance(algorithm, str) and algorithm == AUTO:
        return AUTO
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(
            f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)} or {AUTO}"
        )
    if collective is not None and collective not in ALGORITHM_COLLECTIVES[algorithm]:
        raise ValueError(
            f"algorithm {algorithm!r} has no {collective}: "
            f"use one of {', '.join(algorithms_of(collective))}"
        )
    return algorithm


def check_algorithm_options(algorithm: str, nodes: int, options: dict[str, Any]) -> dict:
    """The options of ``algorithm`` (all optional), checked against ``nodes``."""
    allowed = ALGORITHM_OPTIONS.get(algorithm, ())
    for name in options:
        if name not in allowed:
            takes = [f"{o} ({a})" for a, names in ALGORITHM_OPTIONS.items() for o in names]
            raise ValueError(
                f"option {name!r} is not one of algorithm {algorithm!r}'s: "
                f"options are {', '.join(takes)}"
            )
    checked = {}
    if options.get("segment_bytes") is not None:
        checked["segment_bytes"] = check_int("segment_bytes", options["segment_bytes"], 1)
    if options.get("group_size") is not None:
        size = check_int("group_size", options["group_size"], 1)
        if nodes % size:
            divisors = [d for d in range(1, nodes + 1) if nodes % d == 0]
            raise ValueError(
                f"group_size {size} does not divide {nodes} nodes: use one of "
                f"{', '.join(map(str, divisors))}"
            )
        checked["group_size"] = size
    return checked


def default_segment_bytes(nodes: int, caches: tuple[int, int] | None = None) -> int:
    """ring-segmented's block by default: the N nodes' blocks and the copies in flight fit
    the shared last-level cache together (a quarter of it spread over the nodes), and no
    block is smaller than the per-core L2, below which per-step costs dominate.  ``caches``:
    (L2, last-level) bytes of another machine (a recorded run's), else this one's."""
    l2, last = caches or cache_bytes()
    return max(l2, last // (4 * max(nodes, 1)))


def default_group_size(nodes: int) -> int:
    """hierarchical's groups by default: the largest divisor of N not above sqrt(N)."""
    return max(d for d in range(1, math.isqrt(nodes) + 1) if nodes % d == 0)


# Plans for up to this many nodes keep every node's steps once computed (64 nodes: 8,064
# ring steps); larger ring-family plans compute a node's steps on each request, so state
# stays linear in N.
CACHED_NODES = 64


@dataclass(frozen=True)
class Plan:
    """Every node's steps for one collective on ``nodes`` buffers of ``length`` elements.

    All nodes take the same number of steps (:attr:`steps`), and step ``t`` of one node
    depends only on steps ``< t`` of others (its ``waits``).  ``segment`` (elements per
    block, ring-segmented) and ``group_size`` (hierarchical) are 0 for other algorithms.
    """

    collective: str
    nodes: int
    length: int
    algorithm: str = "ring"
    segment: int = 0
    group_size: int = 0
    _cache: dict[int, tuple[Step, ...]] = field(default_factory=dict, repr=False, compare=False)

    @cached_property
    def blocks(self) -> int:
        """The ring family's passes: one, or one per ``segment`` elements."""
        if self.algorithm != "ring-segmented":
            return 1
        return max(1, -(-self.length // self.segment))

    @cached_property
    def steps(self) -> int:
        if self.nodes == 1:
            return 0
        if self.algorithm in RING_FAMILY:
            return self.blocks * len(COLLECTIVE_PHASES[self.collective]) * (self.nodes - 1)
        return len(self._table[0])

    @cached_property
    def scratch_elements(self) -> int:
        """The longest range any node receives in one step, and the most scratch any move
        touches: what a backend that receives into scratch must hold."""
        if self.algorithm in RING_FAMILY:
            start, stop = chunk_bounds(self.length, self.nodes)[0]
            lanes = 2 if self.algorithm == "ring-bidirectional" else 1
            a, b = chunk_range(stop - start, self.blocks * lanes, 0)
            return b - a if self.nodes > 1 else 0
        return max(
            (
                max(m.dst[1] - m.dst[0], m.src[1] if m.from_scratch else 0)
                for steps in self._table
                for step in steps
                for m in step.moves
            ),
            default=0,
        )

    @cached_property
    def uses_scratch(self) -> bool:
        """Whether some move lands in scratch (a backend must give every node some)."""
        if self.algorithm in RING_FAMILY:
            return False
        return any(m.to_scratch for steps in self._table for s in steps for m in s.moves)

    def node_steps(self, node: int) -> tuple[Step, ...]:
        """Everything ``node`` does, in order."""
        if self.algorithm not in RING_FAMILY:
            return self._table[node]
        steps = self._cache.get(node)
        if steps is None:
            if self.nodes == 1:
                steps = ()
            else:
                steps = ring_family_steps(
                    self.algorithm, self.collective, self.nodes, self.length, node, self.blocks
                )
            if self.nodes <= CACHED_NODES:
                self._cache[node] = steps
        return steps

    @cached_property
    def moves(self) -> tuple[tuple[tuple[Move, ...], ...], ...]:
        """Every node's moves, step by step: two plans of the same moves are one schedule
        under two names (at N = 2, ``direct`` and ``hierarchical`` are the ring)."""
        return tuple(tuple(s.moves for s in self.node_steps(n)) for n in range(self.nodes))

    @cached_property
    def unit(self) -> Plan | None:
        """This plan at one element per chunk, where every range of this plan is that
        plan's with its ends ``k`` moved to ``offsets[k]`` (:func:`chunk_offsets`), else
        None.  An algorithm whose ranges are whole chunks (the ring, and every table-built
        one) has one once each chunk holds more than an element; the unit is built once
        per collective, N and algorithm, so what a plan's moves are (:attr:`key`, how
        many, by position) is known without building them: at a few KiB, building each
        candidate's plan is most of what measuring a new call shape costs."""
        if self.algorithm not in UNIT_ALGORITHMS or self.length <= self.nodes:
            return None
        return _unit(self.collective, self.nodes, self.algorithm, self.group_size)

    @cached_property
    def key(self) -> tuple:
        """Equal for two plans of one length that make the same moves (then they are one
        schedule under two names): the unit's moves where there is one (the ends' map is
        strictly increasing, so mapped moves are equal exactly when the unit's are), else
        the moves.  A plan with a unit and one without never compare equal: a schedule
        timed twice, never two taken for one."""
        unit = self.unit
        return ("unit", self.length, unit.moves) if unit is not None else ("moves", self.moves)

    @cached_property
    def _table(self) -> tuple[tuple[Step, ...], ...]:
        """Every node's steps of a table-built algorithm, with sends and waits derived:
        a node waits for the peers it reads at this step (their writes before it are
        done) and for those that read from it at the step before (this step may
        overwrite what they read).  Only a node writes its own buffer, so these are all
        its hazards, given that no step reads a range its owner writes at that step."""
        n = self.nodes
        if n == 1:
            return ((),)
        build = TABLE_BUILDERS[self.algorithm]
        table = build(self.collective, n, self.length, group_size=self.group_size)
        per_node: list[list[Step]] = [[] for _ in range(n)]
        numbers: dict[str, int] = {}
        readers: list[set[int]] = [set() for _ in range(n)]
        for t, (phase, moves) in enumerate(table):
            number = numbers[phase] = numbers.get(phase, -1) + 1
            sends: list[list[Send]] = [[] for _ in range(n)]
            for node in range(n):
                for m in moves[node]:
                    if m.peer != node:
                        sends[m.peer].append(Send(node, m.src))
            for node in range(n):
                sources = {m.peer for m in moves[node] if m.peer != node}
                waits = tuple(sorted(sources | readers[node])) if t else ()
                per_node[node].append(
                    Step(
                        self.algorithm,
                        phase,
                        number,
                        node,
                        tuple(moves[node]),
                        tuple(sends[node]),
                        waits,
                    )
                )
            readers = [{s.peer for s in sends[node]} for node in range(n)]
        return tuple(tuple(steps) for steps in per_node)


# The algorithms whose every range is a union of whole chunks (ring.schedule.algorithms
# builds shares from chunks; the plain ring moves one chunk a step): a plan of theirs maps
# from its unit (Plan.unit).
UNIT_ALGORITHMS = ("ring", *TABLE_BUILDERS)


def chunk_offsets(length: int, nodes: int) -> tuple[int, ...]:
    """Where each of the ``nodes`` chunks of ``length`` elements starts, and ``length``:
    the chunk boundary ``k`` of a plan's unit is element ``offsets[k]``."""
    return (*(start for start, _ in chunk_bounds(length, nodes)), length)


def mapped_moves(moves: tuple, offsets: tuple[int, ...]) -> tuple:
    """``moves`` (every node's, step by step) with each range's ends ``k`` moved to
    ``offsets[k]``: a plan's moves from its unit's."""
    o = offsets
    return tuple(
        tuple(
            tuple(
                Move(m.peer, (o[m.src[0]], o[m.src[1]]), (o[m.dst[0]], o[m.dst[1]]), *m[3:])
                for m in step
            )
            for step in node
        )
        for node in moves
    )


def unit_probe(unit: Plan) -> Plan:
    """The plan a unit's mapping is checked against: its algorithm at a length of unequal
    chunks (``2N + 1``), where every way a range could fail to follow the chunk
    boundaries shows."""
    n = unit.nodes
    return Plan(unit.collective, n, 2 * n + 1, unit.algorithm, unit.segment, unit.group_size)


@lru_cache(maxsize=256)
def _unit(collective: str, nodes: int, algorithm: str, group_size: int) -> Plan | None:
    """The plan at one element per chunk, where its moves mapped are those of
    :func:`unit_probe`; else None (its ranges are not unions of chunks after all), and
    no plan of the algorithm has a unit."""
    unit = Plan(collective, nodes, nodes, algorithm, 0, group_size)
    probe = unit_probe(unit)
    mapped = mapped_moves(unit.moves, chunk_offsets(probe.length, nodes))
    return unit if mapped == probe.moves else None


@lru_cache(maxsize=64, typed=True)
def plan(
    collective: str,
    nodes: int,
    length: int,
    algorithm: str = "ring",
    segment: int = 0,
    group_size: int = 0,
) -> Plan:
    """The steps of ``collective`` by ``algorithm`` on ``nodes`` buffers of ``length``
    elements (none when ``nodes == 1``): what every backend executes.  ``segment``:
    elements per block of ring-segmented (0: :func:`default_segment_bytes` at 4-byte
    elements); ``group_size``: hierarchical's (0: :func:`default_group_size`)."""
    check_collective(collective)
    if check_algorithm(algorithm, collective) == AUTO:
        raise ValueError("a plan needs a concrete algorithm: resolve 'auto' first")
    nodes = check_int("nodes", nodes, 1)
    length = check_int("length", length, 0)
    segment = check_int("segment", segment, 0)
    group_size = check_int("group_size", group_size, 0)
    if algorithm == "ring-segmented":
        segment = segment or max(1, default_segment_bytes(nodes) // 4)
    else:
        segment = 0
    if algorithm == "hierarchical":
        checked = check_algorithm_options(algorithm, nodes, {"group_size": group_size or None})
        group_size = checked.get("group_size") or default_group_size(nodes)
    else:
        group_size = 0
    return Plan(collective, nodes, length, algorithm, segment, group_size)


def plan_for(
    collective: str, nodes: int, length: int, itemsize: int, algorithm: str, options: dict
) -> Plan:
    """:func:`plan` with the API's options (checked by :func:`check_algorithm_options`):
    ``segment_bytes`` becomes whole elements of ``itemsize`` bytes."""
    segment = 0
    if algorithm == "ring-segmented":
        nbytes = options.get("segment_bytes") or default_segment_bytes(nodes)
        segment = max(1, nbytes // itemsize)
    return plan(collective, nodes, length, algorithm, segment, options.get("group_size") or 0)
