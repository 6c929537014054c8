"""The α–β–γ cost of an allreduce, per algorithm: one table of coefficient functions.

A node's time is ``a·α + b·n·β + c·n·γ`` for a vector of ``n`` bytes: ``a`` message steps on
the critical path (latency α each), ``b·n`` bytes through its busiest link direction (β per
byte), ``c·n`` bytes it reduces (γ per byte).  Thakur, Rabenseifner & Gropp, "Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1), 2005, §4 give ring,
recursive doubling and Rabenseifner; the others are derived below, each in its comment.

Links are full duplex and independent (one per node and direction, or a switch port).  When
the nodes share one memory bus or one device (the harness's ``shared_devices`` column), every
byte any node moves or reduces goes through the same bus, so the per-byte terms count the
bytes of all N nodes: ``N·v·n·β + N·c·n·γ`` with ``v`` the bytes a node receives.  (The
reference CPU ring bears this out: 256 MiB costs 3.0x more at N = 4 than at N = 2, which is
2(N-1) and not 2(N-1)/N.)

Oversubscription.  When the nodes are CPU workers (threads of the cpu backend, MPI ranks on
one host) and there are more of them than cores, p = nodes per core > 1, the time of a call
is multiplied by ``1 + σ·(p - 1)``.  Each worker gets 1/p of a core, so every part of the
call stretches alike: its steps (a message is only taken when the peer is scheduled), its
copies and its reductions; σ = 1 is a fair share, σ > 1 says waiting workers take cores
from working ones (an MPI rank spins while it waits), σ < 1 that part of the call did not
need a core (a shared memory bus that was already the limit).  Forms tried on the
reference sweeps (amd-epyc-2core; held-out points within 25 % at MPI N = 4, of 49, with
no term 3): this one, 30; σ on the steps only (α·(1 + σ(p - 1)), bytes as at p = 1), 8,
since at N = 4 the bytes are about as much slower as the steps; the steps at σ and the
bytes at a fair share p (no fitted factor), 34, but it takes the CPU fit's N = 2 from 34
to 25, its per-byte cost being the shared bus's, which more threads do not slow.  So one
factor on the whole call.  It scales every algorithm alike: at a given N it moves the
predicted times, not which algorithm is fastest (each algorithm's crowded factors,
ring.model.efficiency, say how far it departs from that).  σ is fitted jointly with α, β, γ
(ring.model.fit), identified by rows at p <= 1 beside rows at p > 1; the reference sweep
has one oversubscribed level (p = 2), so the line in p is an assumption past it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from ..schedule import default_group_size, plan

__all__ = [
    "ALGORITHMS",
    "DEFAULT_GROUP_SIZE",
    "DEFAULT_SEGMENT_BYTES",
    "Coefficients",
    "Factors",
    "ModelInputError",
    "Params",
    "above_weight",
    "backend_group_size",
    "check_point",
    "coefficients",
    "inline_moves",
    "oversubscription",
    "predict_seconds",
    "seconds_by_term",
    "terms",
    "working_set",
]

# Group size of `hierarchical` when none is given: GPUs per node of a DGX/HGX board.
DEFAULT_GROUP_SIZE = 8
# Block size of `ring-segmented` when none is given (the model's default, not the backend's).
DEFAULT_SEGMENT_BYTES = 1 << 20


class ModelInputError(ValueError):
    """Bad input to the model; the message is one line that says what and how to fix it."""


class Coefficients(NamedTuple):
    steps: float  # a: latency terms on the critical path
    link: float  # b: bytes (per byte of vector) through the busiest link direction
    reduce: float  # c: bytes (per byte of vector) the busiest node reduces
    received: float  # v: bytes (per byte of vector) a node receives, both directions, mean
    # c on a shared bus: the mean a node reduces, where it differs from the busiest node's
    # (None: every node reduces ``reduce``).
    mean_reduce: float | None = None


class Params(NamedTuple):
    alpha: float  # seconds per step
    beta: float  # seconds per byte on a link (or the shared bus)
    gamma: float  # seconds per byte reduced
    # Past this working set (bytes the nodes hold: N·n on a shared bus, else n) each byte on
    # the link or bus costs ``beta_above``: on a CPU, where the buffers stop fitting in a
    # cache (ring.model.knee.choose_knee finds it; inf: no such change), over ``ramp``.
    knee: float = math.inf
    beta_above: float = 0.0
    # Slow-down per node per core past one: a call at p nodes per core takes 1 + σ(p - 1)
    # times as long (0: no oversubscribed row was fitted, or none of the model's rows).
    sigma: float = 0.0
    # Seconds per node per call of a call run inline (ring.model.regimes): what the calling
    # thread spends on each node's buffer besides its moves (0: not an inline regime's fit).
    per_node: float = 0.0
    # The per-byte cost goes from ``beta`` to ``beta_above`` over the working sets from
    # ``knee`` to ``knee·ramp``, linearly in their logarithm (1: a step at the knee): a
    # cache's hits fall off over a range of sizes, not at one.
    ramp: float = 1.0

    def beta_at(self, nodes: int, nbytes: int, shared: bool) -> float:
        above = above_weight(working_set(nodes, nbytes, shared), self.knee, self.ramp)
        return self.beta + above * (self.beta_above - self.beta)


class Factors(NamedTuple):
    """One algorithm's measured departure from its theoretical coefficients on a machine
    (ring.model.efficiency): its step terms cost ``steps`` times, its per-byte terms
    ``bytes`` times what the table below says.  (1, 1): the theory as written."""

    steps: float = 1.0
    bytes: float = 1.0


THEORY = Factors()


def above_weight(working: float, knee: float, ramp: float) -> float:
    """How far a working set is past the knee: 0 up to ``knee``, 1 from ``knee·ramp``,
    linear in the logarithm between (:class:`Params`)."""
    if working <= knee:
        return 0.0
    if ramp <= 1.0 or working >= knee * ramp:
        return 1.0
    return math.log(working / knee) / math.log(ramp)


def working_set(nodes: int, nbytes: int, shared: bool) -> int:
    """Bytes of buffers in play: all N nodes' on a shared bus, one node's on its own links."""
    return nodes * nbytes if shared else nbytes


def _pow2_split(nodes: int) -> tuple[int, int]:
    """(p', extra): the largest power of two p' <= N and whether N - p' ranks fold in."""
    lower = 1 << (nodes.bit_length() - 1)
    return lower, int(nodes != lower)


def _ring(nodes: int, nbytes: int, group: int, segment: int) -> Coefficients:
    # Thakur et al. (2005) eq. for the ring: reduce-scatter then all-gather, N-1 steps each.
    share = (nodes - 1) / nodes
    return Coefficients(2 * (nodes - 1), 2 * share, share, 2 * share)


def _recursive_doubling(nodes: int, nbytes: int, group: int, segment: int) -> Coefficients:
    # Thakur et al. (2005): log2(N)(α + nβ + nγ).  Non-power-of-two N as MPICH does: the N - p'
    # extra ranks first send their whole vector to a partner (α + nβ + nγ) and get the
    # result back at the end (α + nβ).
    lower, extra = _pow2_split(nodes)
    k = math.log2(lower)
    return Coefficients(k + 2 * extra, k + 2 * extra, k + extra, k + 2 * extra)


def _rabenseifner(nodes: int, nbytes: int, group: int, segment: int) -> Coefficients:
    # Thakur et al. (2005): recursive-halving reduce-scatter + recursive-doubling all-gather,
    # 2log2(N)α + 2(N-1)/N·nβ + (N-1)/N·nγ; non-power-of-two N folds in as above.
    lower, extra = _pow2_split(nodes)
    share = (lower - 1) / lower
    steps = 2 * math.log2(lower) + 2 * extra
    return Coefficients(steps, 2 * share + 2 * extra, share + extra, 2 * share + 2 * extra)


def _ring_segmented(nodes: int, nbytes: int, group: int, segment: int) -> Coefficients:
    # Issue #11's CPU form: ceil(n / segment) full ring passes, one after the other, so the
    # steps multiply and the bytes do not.  Overlap between blocks (the GPU form) would hide
    # part of it; it is not modelled.
    passes = max(1, math.ceil(nbytes / segment))
    ring = _ring(nodes, nbytes, group, segment)
    return ring._replace(steps=ring.steps * passes)


def _ring_bidirectional(nodes: int, nbytes: int, group: int, segment: int) -> Coefficients:
    # Two rings of n/2 each, in opposite directions at once: each direction of a link carries
    # half the ring's bytes; a node still receives and reduces as much as in one ring.
    ring = _ring(nodes, nbytes, group, segment)
    return ring._replace(link=ring.link / 2)


def hierarchy(nodes: int, group: int) -> tuple[int, int]:
    """(G, M): the largest group size G <= ``group`` that divides N, and M = N / G groups."""
    size = next(g for g in range(min(group, nodes), 0, -1) if nodes % g == 0)
    return size, nodes // size


def _hierarchical(nodes: int, nbytes: int, group: int, segment: int) -> Coefficients:
    # Derived: ring reduce-scatter inside groups of G ((G-1)α + (G-1)/G·n(β+γ)), a ring
    # allreduce of the n/G reduced bytes across the M groups (2(M-1)α + 2(M-1)/M·(n/G)β +
    # (M-1)/M·(n/G)γ), ring all-gather inside groups ((G-1)α + (G-1)/G·nβ).  On one kind of
    # link the bytes add up to the ring's, 2(N-1)/N and (N-1)/N; only the steps shrink.
    size, groups = hierarchy(nodes, group)
    share = (nodes - 1) / nodes
    return Coefficients(2 * (size - 1) + 2 * (groups - 1), 2 * share, share, 2 * share)


def _direct(nodes: int, nbytes: int, group: int, segment: int) -> Coefficients:
    # Derived, fully connected (a switch port per node): one step in which each node reads its
    # chunk n/N from the N-1 others and reduces it, one step in which it fetches the N-1
    # reduced chunks: 2(N-1)α + 2(N-1)/N·nβ + (N-1)/N·nγ.  The bytes cross N-1 links at
    # once, but each of a step's N-1 messages each way costs its node one α, paid one
    # after the other (single-port, as Thakur et al. count steps): 2α made auto pick direct
    # at MPI N = 4 from 2 to 512 KiB, where it measures as slow as the ring (6 steps) and
    # reduce-broadcast and recursive doubling are 1.1-1.5x faster (intel-xeon-2core).
    # Reduce-broadcast's node 0 also takes N-1 messages a step, but measures 0.7x the
    # ring's step cost there, not level with it; it keeps 2α, and its factor κ
    # (ring.model.efficiency) carries the difference.
    share = (nodes - 1) / nodes
    return Coefficients(2 * (nodes - 1), 2 * share, share, 2 * share)


def _reduce_broadcast(nodes: int, nbytes: int, group: int, segment: int) -> Coefficients:
    # Derived, fully connected: a linear reduce, node 0 taking and reducing the N-1 other
    # vectors in one step, then a linear broadcast, the N-1 others fetching its result:
    # 2α + 2(N-1)·nβ + (N-1)·nγ.  Node 0's link carries (N-1)·n in, then (N-1)·n out: the
    # broadcast needs the reduce's result, so the two directions are busy one after the
    # other, not at once as in the ring's steps (at N = 2 the ring moves n/2 each way per
    # step, reduce-broadcast n one way; measured on MPI, 2x the ring's time from 2 MiB).
    # On a shared bus only the totals count: 2(N-1)·n bytes received and (N-1)·n reduced
    # over the N nodes, direct's.
    share = (nodes - 1) / nodes
    return Coefficients(2, 2 * (nodes - 1), nodes - 1, 2 * share, share)


CoefficientFunction = Callable[[int, int, int, int], Coefficients]

ALGORITHMS: dict[str, CoefficientFunction] = {
    "ring": _ring,
    "ring-segmented": _ring_segmented,
    "ring-bidirectional": _ring_bidirectional,
    "recursive-doubling": _recursive_doubling,
    "rabenseifner": _rabenseifner,
    "hierarchical": _hierarchical,
    "direct": _direct,
    "reduce-broadcast": _reduce_broadcast,
}


def check_point(algorithm: str, nodes: int, nbytes: int) -> None:
    """Refuse an unknown algorithm, N < 1 or a negative size with one line."""
    if algorithm not in ALGORITHMS:
        raise ModelInputError(
            f"unknown algorithm {algorithm!r}: choose one of {', '.join(ALGORITHMS)}"
        )
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ModelInputError(f"nodes must be a whole number >= 1, got {nodes!r}")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ModelInputError(f"size must be a whole number of bytes >= 0, got {nbytes!r}")


def coefficients(
    algorithm: str,
    nodes: int,
    nbytes: int,
    *,
    group_size: int = DEFAULT_GROUP_SIZE,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
) -> Coefficients:
    """(a, b, c, v) of ``algorithm`` on N nodes for an n-byte vector; all zero for N = 1."""
    check_point(algorithm, nodes, nbytes)
    if group_size < 1 or segment_bytes < 1:
        raise ModelInputError("group_size and segment_bytes must be >= 1")
    if nodes == 1:
        return Coefficients(0.0, 0.0, 0.0, 0.0)
    return ALGORITHMS[algorithm](nodes, nbytes, group_size, segment_bytes)


def backend_group_size(backend: str, nodes: int) -> int:
    """hierarchical's groups when a call names none, as ``backend`` forms them: the cpu and
    gpu backends take ring.schedule.default_group_size (2 of 2 at N = 4); an MPI run's ranks
    on one host are one group (``Split_type(COMM_TYPE_SHARED)``; the harness runs MPI on one
    host); any other backend the model's default, :data:`DEFAULT_GROUP_SIZE`."""
    if backend in ("cpu", "gpu"):
        return default_group_size(nodes)
    return nodes if backend == "mpi" else DEFAULT_GROUP_SIZE


# Bytes per element the plans of inline_moves are built for: the count of moves depends on
# the bytes only through ring-segmented's blocks (bytes over block bytes) and lengths < N.
PLAN_ITEMSIZE = 4


@lru_cache(maxsize=1024)
def inline_moves(algorithm: str, nodes: int, nbytes: int, group: int, segment: int) -> int:
    """Moves of every node's steps in the plan the backends execute (ring.schedule): what a
    call run inline does one after the other on the calling thread, one NumPy call each.
    At N = 4: reduce-broadcast 6, recursive doubling 16, the ring, Rabenseifner,
    hierarchical and direct 24, the bidirectional ring 48."""
    if nodes == 1:
        return 0
    length = max(1, nbytes // PLAN_ITEMSIZE)
    size = hierarchy(nodes, group)[0] if algorithm == "hierarchical" else 0
    block = max(1, segment // PLAN_ITEMSIZE) if algorithm == "ring-segmented" else 0
    schedule = plan("allreduce", nodes, length, algorithm, block, size)
    return sum(len(step.moves) for node in range(nodes) for step in schedule.node_steps(node))


def design_row(coef: Coefficients, nodes: int, nbytes: int, shared: bool) -> tuple[float, ...]:
    """The multipliers of (α, β, γ) in the time of one call."""
    if shared:
        reduce = coef.reduce if coef.mean_reduce is None else coef.mean_reduce
        return (coef.steps, nodes * coef.received * nbytes, nodes * reduce * nbytes)
    return (coef.steps, coef.link * nbytes, coef.reduce * nbytes)


def oversubscription(sigma: float, nodes_per_core: float) -> float:
    """The factor 1 + σ·(p - 1) of a call at p nodes per core (1 at p <= 1)."""
    for name, value in (("sigma", sigma), ("nodes per core", nodes_per_core)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ModelInputError(f"{name} must be a number >= 0, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ModelInputError(f"{name} must be finite and >= 0, got {value!r}")
    return 1.0 + sigma * max(0.0, nodes_per_core - 1.0)


def predict_seconds(
    params: Params,
    algorithm: str,
    nodes: int,
    nbytes: int,
    *,
    shared: bool = False,
    group_size: int = DEFAULT_GROUP_SIZE,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    nodes_per_core: float = 0.0,
    factors: Factors = THEORY,
    inline: bool = False,
) -> float:
    """Predicted seconds of one allreduce of ``nbytes`` on ``nodes`` nodes, run with
    ``nodes_per_core`` workers per core (0: not CPU workers, or not known), the algorithm's
    theoretical step and byte terms scaled by ``factors``; ``inline``: the call runs on one
    thread (ring.model.regimes), its steps the plan's moves, plus ``per_node`` per node."""
    return sum(
        seconds_by_term(
            params,
            algorithm,
            nodes,
            nbytes,
            shared=shared,
            group_size=group_size,
            segment_bytes=segment_bytes,
            nodes_per_core=nodes_per_core,
            factors=factors,
            inline=inline,
        ).values()
    )


def seconds_by_term(
    params: Params,
    algorithm: str,
    nodes: int,
    nbytes: int,
    *,
    shared: bool = False,
    group_size: int = DEFAULT_GROUP_SIZE,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    nodes_per_core: float = 0.0,
    factors: Factors = THEORY,
    inline: bool = False,
) -> dict[str, float]:
    """:func:`predict_seconds` by term: the seconds of its steps (``alpha``), of the bytes
    it moves (``beta``), of the bytes it reduces (``gamma``) and, inline, of its nodes'
    buffers (``per_node``); what the model says decides a call's time."""
    factor = oversubscription(params.sigma, nodes_per_core)
    steps, link, reduce, fixed = terms(
        algorithm, nodes, nbytes, shared, group_size, segment_bytes, inline
    )
    beta = params.beta_at(nodes, nbytes, shared)
    return {
        "alpha": factor * factors.steps * steps * params.alpha,
        "beta": factor * factors.bytes * link * beta,
        "gamma": factor * factors.bytes * reduce * params.gamma,
        "per_node": factor * fixed * params.per_node,
    }


def terms(
    algorithm: str,
    nodes: int,
    nbytes: int,
    shared: bool,
    group_size: int = DEFAULT_GROUP_SIZE,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    inline: bool = False,
) -> tuple[float, float, float, float]:
    """The multipliers of (α, β, γ, per_node) in the time of one call.  Threaded (or on
    links): the critical path's steps, and no per-node term.  Inline: one thread runs every
    node's moves in turn, so the steps are the plan's moves, and each node's buffer costs
    ``per_node`` (what a call does per buffer besides the moves: 1.5 µs in the
    intel-xeon-2core default fit, whose calls repeat on their buffers and run bound, against
    0.19 µs a move; 6.5 µs and 0.2 µs unbound.  One constant per call in its place, fitted
    to the N = 4 rows, priced the N = 2 rows about half again too high)."""
    coef = coefficients(
        algorithm, nodes, nbytes, group_size=group_size, segment_bytes=segment_bytes
    )
    steps, link, reduce = design_row(coef, nodes, nbytes, shared)
    if not inline or nodes == 1:
        return steps, link, reduce, 0.0
    moves = inline_moves(algorithm, nodes, nbytes, group_size, segment_bytes)
    return float(moves), link, reduce, float(nodes)
