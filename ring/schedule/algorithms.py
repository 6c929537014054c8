"""The algorithms beyond the ring family, built as whole tables of moves.

Each builder returns a table: one entry per step, ``(phase, moves)`` with ``moves[i]`` the
:class:`~ring.schedule.steps.Move` s of node ``i`` (empty when it is idle).
:func:`ring.schedule.plan` adds what follows from the table (each node's sends, and the
peers it waits for) in one place.

Every algorithm keeps the ring's ownership: after reduce-scatter node ``i`` holds
``owned_chunk(i, N)`` fully reduced, and all-gather starts from it.  Where an algorithm
splits the buffer among fewer or differently arranged nodes than N (recursive halving, the
hierarchy's groups), a node's share is the set of chunks its nodes own, cut into
contiguous ranges, so one step may move several ranges.

Non-power-of-two N is handled as MPICH does: with ``p`` the largest power of two below N
and ``r = N - p``, each even node below ``2r`` folds its data into the next node and takes
the result back last; the other ``p`` nodes run the power-of-two algorithm.
"""

from __future__ import annotations

from collections.abc import Iterable

from .ring import owned_chunk
from .steps import ALL_GATHER, REDUCE_SCATTER, Move, Range, chunk_bounds

__all__ = ["TABLE_BUILDERS", "Table"]

Table = list[tuple[str, list[list[Move]]]]


def _ranges(bounds: tuple[Range, ...], chunks: Iterable[int]) -> list[Range]:
    """The non-empty contiguous element ranges covering ``chunks``."""
    merged: list[Range] = []
    for c in sorted(set(chunks)):
        a, b = bounds[c]
        if a == b:
            continue
        if merged and merged[-1][1] == a:
            merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


def _step(table: Table, phase: str, nodes: int) -> list[list[Move]]:
    moves: list[list[Move]] = [[] for _ in range(nodes)]
    table.append((phase, moves))
    return moves


def _take(moves: list[Move], peer: int, ranges: list[Range], accumulate: bool, completes: bool):
    moves.extend(Move(peer, r, r, accumulate, completes) for r in ranges)


def direct(collective: str, nodes: int, length: int, **_) -> Table:
    """One step: node i reduces its own chunk reading it from every other node; then one
    step: node i copies every other node's chunk."""
    bounds = chunk_bounds(length, nodes)
    table: Table = []
    others = [[(i + k) % nodes for k in range(1, nodes)] for i in range(nodes)]
    if collective != ALL_GATHER:
        moves = _step(table, REDUCE_SCATTER, nodes)
        for i in range(nodes):
            mine = _ranges(bounds, [owned_chunk(i, nodes)])
            for k, j in enumerate(others[i]):
                _take(moves[i], j, mine, True, k == nodes - 2)
    if collective != REDUCE_SCATTER:
        moves = _step(table, ALL_GATHER, nodes)
        for i in range(nodes):
            for j in others[i]:
                _take(moves[i], j, _ranges(bounds, [owned_chunk(j, nodes)]), False, False)
    return table


def reduce_broadcast(collective: str, nodes: int, length: int, **_) -> Table:
    """Everything through node 0, in two steps (Open MPI's "nonoverlapping" allreduce, with
    a linear reduce and broadcast).  Allreduce: node 0 reduces every other node's whole
    buffer into its own, in node order, then every other node copies node 0's.
    Reduce-scatter: the same reduction, then each node copies its own chunk of it.
    All-gather: node 0 copies every node's chunk, then every node copies the chunks it
    lacks.  Node 0 takes and sends N - 1 buffers: the ring's opposite on links.  On one
    shared memory an allreduce is 2(N - 1) moves whatever N, what a hand-written reduction
    does, where ``direct`` cuts the buffer into chunks and makes 2N(N - 1): at small sizes,
    where each move is one NumPy call, the cheapest plan (ring.host)."""
    bounds = chunk_bounds(length, nodes)
    whole = _ranges(bounds, range(nodes))
    table: Table = []
    if collective == ALL_GATHER:
        first = _step(table, "gather", nodes)
        for peer in range(1, nodes):
            _take(first[0], peer, _ranges(bounds, [owned_chunk(peer, nodes)]), False, False)
    else:
        first = _step(table, "reduce", nodes)
        for peer in range(1, nodes):
            _take(first[0], peer, whole, True, peer == nodes - 1)
    second = _step(table, "scatter" if collective == REDUCE_SCATTER else "broadcast", nodes)
    for node in range(1, nodes):
        if collective == REDUCE_SCATTER:
            wanted = [owned_chunk(node, nodes)]
        elif collective == ALL_GATHER:
            wanted = [c for c in range(nodes) if c != owned_chunk(node, nodes)]
        else:
            wanted = list(range(nodes))
        _take(second[node], 0, _ranges(bounds, wanted), False, False)
    return table


class _Folded:
    """MPICH's non-power-of-two arrangement: ``power`` survivors, survivor ``r`` stands for
    ``members[r]`` (itself, and the even node that folded into it)."""

    def __init__(self, nodes: int):
        power = 1 << (nodes.bit_length() - 1)
        extra = nodes - power
        self.nodes, self.power, self.extra = nodes, power, extra
        self.real = [2 * r + 1 if r < extra else r + extra for r in range(power)]
        self.members = [[2 * r, 2 * r + 1] if r < extra else [r + extra] for r in range(power)]

    def folds(self) -> list[tuple[int, int]]:
        """(the node that folds, the survivor it folds into)."""
        return [(2 * r, 2 * r + 1) for r in range(self.extra)]

    def chunks(self, ranks: Iterable[int]) -> list[int]:
        return [owned_chunk(m, self.nodes) for r in ranks for m in self.members[r]]

    def fold(self, table: Table, ranges) -> None:
        """Each folding node hands ``ranges(node)`` to its survivor: accumulated for a
        reduction, copied (``ranges`` of its own chunk) for all-gather."""
        if self.extra:
            moves = _step(table, "fold", self.nodes)
            for src, dst in self.folds():
                rs, accumulate = ranges(src)
                _take(moves[dst], src, rs, accumulate, False)

    def unfold(self, table: Table, ranges) -> None:
        if self.extra:
            moves = _step(table, "unfold", self.nodes)
            for dst, src in self.folds():
                _take(moves[dst], src, ranges(dst), False, False)


def recursive_doubling(collective: str, nodes: int, length: int, **options) -> Table:
    """Allreduce: at round k survivor r exchanges the whole buffer with r ^ 2^k.  Both
    partners read what the other overwrites, so each round is two steps: take the
    partner's buffer into scratch, then accumulate it (see ``PHASES``), the lower node's
    partial first on both (``Move.source_first``), so both hold the same bits.  All-gather is
    Rabenseifner's (recursive doubling too)."""
    if collective != "allreduce":
        return rabenseifner(collective, nodes, length, **options)
    folded = _Folded(nodes)
    whole = [(0, length)] if length else []
    table: Table = []
    folded.fold(table, lambda node: (whole, True))
    rounds = folded.power.bit_length() - 1
    for k in range(rounds):
        pulls = _step(table, "exchange", nodes)
        sums = _step(table, "exchange", nodes)
        for r, node in enumerate(folded.real):
            partner = folded.real[r ^ (1 << k)]
            for a, b in whole:
                pulls[node].append(Move(partner, (a, b), (0, b - a), False, to_scratch=True))
                done = k == rounds - 1
                # Both partners compute the lower one's partial op the higher one's.
                first = partner < node
                sums[node].append(Move(node, (0, b - a), (a, b), True, done, True, False, first))
    folded.unfold(table, lambda node: whole)
    return table


def rabenseifner(collective: str, nodes: int, length: int, **_) -> Table:
    """Reduce-scatter by recursive halving (at round k survivor r keeps the chunks of the
    survivors that agree with it on bit k and reduces them from r ^ 2^k), all-gather by
    recursive doubling (the same rounds backwards, copying)."""
    folded = _Folded(nodes)
    bounds = chunk_bounds(length, nodes)
    table: Table = []
    rounds = folded.power.bit_length() - 1
    # kept[k][r]: the survivors whose chunks r is responsible for after round k.
    kept = [[list(range(folded.power)) for _ in range(folded.power)]]
    for k in range(rounds):
        bit = 1 << k
        kept.append([[q for q in kept[k][r] if q & bit == r & bit] for r in range(folded.power)])
    if collective != ALL_GATHER:
        folded.fold(table, lambda node: (_ranges(bounds, range(nodes)), True))
        for k in range(rounds):
            moves = _step(table, REDUCE_SCATTER, nodes)
            for r, node in enumerate(folded.real):
                mine = _ranges(bounds, folded.chunks(kept[k + 1][r]))
                _take(moves[node], folded.real[r ^ (1 << k)], mine, True, k == rounds - 1)
    else:
        folded.fold(table, lambda node: (_ranges(bounds, [owned_chunk(node, nodes)]), False))
    if collective != REDUCE_SCATTER:
        for k in reversed(range(rounds)):
            moves = _step(table, ALL_GATHER, nodes)
            for r, node in enumerate(folded.real):
                partner = r ^ (1 << k)
                theirs = _ranges(bounds, folded.chunks(kept[k + 1][partner]))
                _take(moves[node], folded.real[partner], theirs, False, False)
        folded.unfold(table, lambda node: _ranges(bounds, range(nodes)))
    else:
        folded.unfold(table, lambda node: _ranges(bounds, [owned_chunk(node, nodes)]))
    return table


def _ring_over(table: Table, phase: str, members: list[list[int]], shares) -> None:
    """Rings run side by side: ``members[g]`` is one ring (index order), and
    ``shares(g, idx)`` the chunk ranges its member ``idx`` ends owning.  Reduce-scatter and
    all-gather follow the ring's arithmetic on those shares."""
    size = len(members[0])
    for s in range(size - 1):
        moves = _step(table, phase, len(members) * size)
        for g, ring in enumerate(members):
            for idx, node in enumerate(ring):
                left = ring[(idx - 1) % size]
                if phase == REDUCE_SCATTER:
                    got, done = shares(g, (idx - 2 - s) % size), s == size - 2
                else:
                    got, done = shares(g, (idx - 1 - s) % size), False
                _take(moves[node], left, got, phase == REDUCE_SCATTER, done)


def hierarchical(collective: str, nodes: int, length: int, *, group_size: int, **_) -> Table:
    """Groups of ``group_size`` consecutive nodes.  Member k of every group is responsible
    for the chunks that the k-th members of all groups own: reduce-scatter inside each
    group on those shares, then a ring across the groups' k-th members on their own
    chunks; all-gather the same way back."""
    size, groups = group_size, nodes // group_size
    bounds = chunk_bounds(length, nodes)
    inside = [[g * size + k for k in range(size)] for g in range(groups)]
    across = [[g * size + k for g in range(groups)] for k in range(size)]

    def share(g, k):
        return _ranges(bounds, [owned_chunk(h * size + k, nodes) for h in range(groups)])

    def own(k, g):
        return _ranges(bounds, [owned_chunk(g * size + k, nodes)])

    table: Table = []
    if collective != ALL_GATHER:
        n_inside = len(table)
        _ring_over(table, REDUCE_SCATTER, inside, share)
        if groups > 1:
            # The group's reduction is not the full one: only the ring across completes.
            for _phase, step_moves in table[n_inside:]:
                for node_moves in step_moves:
                    node_moves[:] = [m._replace(completes=False) for m in node_moves]
        _ring_over(table, REDUCE_SCATTER, across, own)
    if collective != REDUCE_SCATTER:
        _ring_over(table, ALL_GATHER, across, own)
        _ring_over(table, ALL_GATHER, inside, share)
    return table


TABLE_BUILDERS = {
    "recursive-doubling": recursive_doubling,
    "rabenseifner": rabenseifner,
    "hierarchical": hierarchical,
    "direct": direct,
    "reduce-broadcast": reduce_broadcast,
}
