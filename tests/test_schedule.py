"""The ring schedule: chunk arithmetic, ownership, and that both sync strategies order
every conflicting access (so any interleaving the backends allow gives the right result)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ring import chunk_range, owned_chunk, ring_schedule
from ring.nvtx import STEP_RANGE
from ring.schedule import ALGORITHM_COLLECTIVES, ALGORITHMS, plan


@given(total=st.integers(0, 10_000), num_chunks=st.integers(1, 200))
def test_chunk_range_tiles_the_buffer_evenly(total, num_chunks):
    ranges = [chunk_range(total, num_chunks, i) for i in range(num_chunks)]
    assert ranges[0][0] == 0
    assert ranges[-1][1] == total
    for (_, stop), (start, _) in itertools.pairwise(ranges):
        assert stop == start
    lengths = [stop - start for start, stop in ranges]
    assert max(lengths) - min(lengths) <= 1
    extra = total % num_chunks
    assert lengths == [total // num_chunks + (i < extra) for i in range(num_chunks)]


@pytest.mark.parametrize(
    ("total", "num_chunks", "expected"),
    [
        (10, 4, [(0, 3), (3, 6), (6, 8), (8, 10)]),
        (2, 4, [(0, 1), (1, 2), (2, 2), (2, 2)]),
        (0, 3, [(0, 0), (0, 0), (0, 0)]),
        (7, 1, [(0, 7)]),
        (13, 3, [(0, 5), (5, 9), (9, 13)]),
    ],
)
def test_chunk_range_examples(total, num_chunks, expected):
    assert [chunk_range(total, num_chunks, i) for i in range(num_chunks)] == expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((10, 0, 0), "num_chunks"),
        ((10, -1, 0), "num_chunks"),
        ((10, 4, 4), "index"),
        ((10, 4, -1), "index"),
        ((-1, 4, 0), "total"),
    ],
)
def test_chunk_range_rejects_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        chunk_range(*args)


def test_chunk_range_rejects_non_integers():
    with pytest.raises(TypeError):
        chunk_range(10.0, 4, 0)
    with pytest.raises(TypeError):
        chunk_range(10, True, 0)


@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 5, 8, 13])
def test_each_node_owns_a_different_chunk(nodes):
    owned = [owned_chunk(i, nodes) for i in range(nodes)]
    assert sorted(owned) == list(range(nodes))


def test_owned_chunk_rejects_bad_arguments():
    with pytest.raises(ValueError):
        owned_chunk(4, 4)
    with pytest.raises(ValueError):
        owned_chunk(0, 0)


@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 7, 16])
def test_schedule_shape(nodes):
    schedule = ring_schedule(nodes)
    for phase, accumulate in zip(schedule.phases, (True, False), strict=True):
        assert len(phase.steps) == nodes - 1
        for s, step in enumerate(phase.steps):
            assert [t.node for t in step] == list(range(nodes))
            # Every node receives a different chunk at each step, from its left neighbour.
            assert sorted(t.chunk for t in step) == list(range(nodes))
            for t in step:
                assert t.src == (t.node - 1) % nodes
                assert t.step == s
                assert t.accumulate is accumulate
                assert STEP_RANGE.match(t.name).group("phase") == phase.name


def _simulate(nodes, phases, state):
    """Lock-step execution on sets of contributions: accumulate must add each node's
    contribution exactly once; copy overwrites."""
    schedule = ring_schedule(nodes)
    for phase in schedule.phases:
        if phase.name not in phases:
            continue
        for step in phase.steps:
            incoming = [state[t.src][t.chunk] for t in step]
            for t, value in zip(step, incoming, strict=True):
                if t.accumulate:
                    assert not state[t.node][t.chunk] & value, "a contribution counted twice"
                    state[t.node][t.chunk] = state[t.node][t.chunk] | value
                else:
                    state[t.node][t.chunk] = value
    return state


@pytest.mark.parametrize("nodes", range(1, 13))
def test_schedule_reduces_every_contribution_exactly_once(nodes):
    everyone = frozenset(range(nodes))
    fresh = [[frozenset([i]) for _ in range(nodes)] for i in range(nodes)]
    after_rs = _simulate(nodes, ("reduce_scatter",), [row[:] for row in fresh])
    for i in range(nodes):
        assert after_rs[i][owned_chunk(i, nodes)] == everyone
    full = _simulate(nodes, ("reduce_scatter", "all_gather"), [row[:] for row in fresh])
    assert all(chunk == everyone for row in full for chunk in row)
    # all_gather alone distributes each node's owned chunk unchanged.
    tagged = [[("junk", i, c) for c in range(nodes)] for i in range(nodes)]
    for i in range(nodes):
        tagged[i][owned_chunk(i, nodes)] = ("owned", i)
    gathered = _simulate(nodes, ("all_gather",), tagged)
    for i in range(nodes):
        for c in range(nodes):
            assert gathered[i][c] == ("owned", (c - 1) % nodes)


def _happens_before(steps, sync):
    """before[i][t]: bit mask of the events (node j, step u) at bit j * T + u that end
    before node i starts step t, under the plan's waits (pairwise) or a full barrier."""
    nodes, total = steps.nodes, steps.steps
    per_node = [steps.node_steps(i) for i in range(nodes)]
    before = [[0] * total for _ in range(nodes)]
    for t in range(1, total):
        for i in range(nodes):
            waits = range(nodes) if sync == "barrier" else {i, *per_node[i][t].waits}
            mask = 0
            for j in waits:
                mask |= before[j][t - 1] | 1 << (j * total + t - 1)
            before[i][t] = mask
    return before


def _accesses(steps):
    """Per buffer: its owner's writes and other nodes' reads, as (step, node, (a, b))."""
    writes = {i: [] for i in range(steps.nodes)}
    reads = {i: [] for i in range(steps.nodes)}
    for i in range(steps.nodes):
        for t, step in enumerate(steps.node_steps(i)):
            for m in step.moves:
                if not m.from_scratch:
                    reads[m.peer].append((t, i, m.src))
                if not m.to_scratch:
                    writes[i].append((t, i, m.dst))
    return writes, reads


def _sync_cases():
    for algorithm in ALGORITHMS:
        for nodes in range(2, 17):
            for length in sorted({1, nodes - 1, nodes + 1, 13, 37}):
                for collective in ALGORITHM_COLLECTIVES[algorithm]:
                    yield algorithm, nodes, length, collective


@pytest.mark.parametrize("sync", ["pairwise", "barrier"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_sync_orders_every_conflicting_access(algorithm, sync):
    """Reads see the writes of earlier steps and are never overtaken by later writes.

    Node i at step t waits for its own step t - 1 and for the step t - 1 of the peers
    its step ``waits`` for (pairwise), or for every node's step t - 1 (barrier); within
    a step, no node reads a range that its owner writes.  Only a node writes its buffer
    (scratch is private), so every hazard is an owner's write against another's read.
    """
    for _, nodes, length, collective in (c for c in _sync_cases() if c[0] == algorithm):
        options = {"segment": max(1, nodes - 1)} if algorithm == "ring-segmented" else {}
        if algorithm == "hierarchical":
            options = {"group_size": max(d for d in (1, 2, 3) if nodes % d == 0)}
        steps = plan(collective, nodes, length, algorithm, **options)
        total = steps.steps
        before = _happens_before(steps, sync)
        writes, reads = _accesses(steps)
        for owner in range(nodes):
            for tw, _, (wa, wb) in writes[owner]:
                for tr, reader, (ra, rb) in reads[owner]:
                    overlap = ra < rb and wa < wb and ra < wb and wa < rb
                    if reader == owner or not overlap:
                        continue
                    case = (collective, nodes, length, owner, tw, reader, tr)
                    assert tw != tr, f"a range read and written in one step: {case}"
                    if tr < tw:
                        assert before[owner][tw] >> (reader * total + tr) & 1, case
                    else:
                        assert before[reader][tr] >> (owner * total + tw) & 1, case


@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "all_gather"])
def test_hierarchical_in_one_group_is_the_ring(collective):
    """With every node in one group, hierarchical's plan moves what the ring's moves, step
    for step (empty ranges aside): the MPI backend runs it as the ring (ring.mpi.steps)."""

    def moved(step):
        moves = [
            (m.peer, m.src, m.dst, m.accumulate, m.completes, m.to_scratch, m.from_scratch)
            for m in step.moves
            if m.src[1] > m.src[0]
        ]
        return moves + [(s.peer, s.src) for s in step.sends if s.src[1] > s.src[0]]

    for nodes, length in itertools.product(range(1, 9), (0, 1, 3, 7, 1000, 1001)):
        ring = plan(collective, nodes, length)
        grouped = plan(collective, nodes, length, "hierarchical", 0, nodes)
        assert grouped.steps == ring.steps
        for node in range(nodes):
            pairs = zip(grouped.node_steps(node), ring.node_steps(node), strict=True)
            assert all(moved(a) == moved(b) for a, b in pairs), (nodes, length)
