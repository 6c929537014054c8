"""The one plan every backend executes (:func:`ring.schedule.plan`), for every algorithm,
checked against derivations of its own: a symbolic run on sets of contributions, a run on
float64 data compared with NumPy's reductions, and the pairing of what one node sends with
what its peer receives."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from ring.schedule import (
    ALGORITHM_COLLECTIVES,
    ALGORITHMS,
    COLLECTIVES,
    Plan,
    chunk_offsets,
    chunk_range,
    owned_chunk,
    plan,
    plans,
    ring_schedule,
)
from ring.schedule.plans import mapped_moves

# Up to 8 nodes in the quick tier; 9 to 16 in the full suite (tests/tiers.py).
NODES = [*range(1, 9), *(pytest.param(n, marks=pytest.mark.slow) for n in range(9, 17))]
PRIMES = [2, 3, 5, 13, 101]


def _lengths(nodes):
    """Lengths below N (some nodes own an empty range), zero, one, and primes."""
    return sorted({0, 1, max(nodes - 1, 0), *PRIMES})


def _plans(collective, nodes, length):
    """One plan per algorithm that has ``collective``; ring-segmented with blocks of a
    few elements (so a short buffer takes several passes) and a whole-buffer block."""
    for algorithm in ALGORITHMS:
        if collective not in ALGORITHM_COLLECTIVES[algorithm]:
            continue
        if algorithm == "ring-segmented":
            yield plan(collective, nodes, length, algorithm, segment=max(1, 2 * nodes - 1))
            yield plan(collective, nodes, length, algorithm, segment=length + 1)
        elif algorithm == "hierarchical":
            for size in {d for d in (1, 2, 3, nodes) if nodes % d == 0}:
                yield plan(collective, nodes, length, algorithm, group_size=size)
        else:
            yield plan(collective, nodes, length, algorithm)


def execute(steps, state, accumulate, on_complete=None):
    """Run ``steps`` in lock step on per-element values; ``accumulate(mine, theirs)``;
    ``on_complete(node, values)`` sees each range a move ``completes``.  Within a step
    every node reads its peers' buffers as they were before the step (no node reads a
    range its owner writes in the same step: the hazard check of test_schedule.py)."""
    nodes = steps.nodes
    per_node = [steps.node_steps(i) for i in range(nodes)]
    assert {len(s) for s in per_node} == {steps.steps}
    scratch = [[None] * steps.scratch_elements for _ in range(nodes)]
    for t in range(steps.steps):
        before = [row[:] for row in state]
        for i, node_steps in enumerate(per_node):
            for move in node_steps[t].moves:
                (a, b), (c, d) = move.src, move.dst
                assert b - a == d - c
                src = scratch[i] if move.from_scratch else before[move.peer]
                dst = scratch[i] if move.to_scratch else state[i]
                assert move.from_scratch == (move.peer == i)
                values = src[a:b]
                dst[c:d] = (
                    [accumulate(x, y) for x, y in zip(dst[c:d], values, strict=True)]
                    if move.accumulate
                    else values
                )
                if move.completes and on_complete is not None:
                    on_complete(i, dst[c:d])
    return state


def _union_once(mine, theirs):
    assert not mine & theirs, "a contribution reduced twice"
    return mine | theirs


@pytest.mark.parametrize("nodes", NODES)
def test_every_contribution_is_reduced_exactly_once(nodes):
    """Contributions as bit masks: every element of every node's result holds every
    node's contribution, each once; avg's completing moves reach each element once."""
    everyone = (1 << nodes) - 1
    for length in _lengths(nodes):
        fresh = [[1 << i] * length for i in range(nodes)]
        for steps in _plans("allreduce", nodes, length):

            def complete(node, values):
                assert all(value == everyone for value in values)

            full = execute(steps, [row[:] for row in fresh], _union_once, complete)
            assert all(value == everyone for row in full for value in row), steps
        for steps in _plans("reduce_scatter", nodes, length):
            scattered = execute(steps, [r[:] for r in fresh], _union_once)
            for i in range(nodes):
                a, b = chunk_range(length, nodes, owned_chunk(i, nodes))
                assert all(value == everyone for value in scattered[i][a:b]), (steps, i)


@pytest.mark.parametrize("nodes", NODES)
def test_every_result_element_is_completed_exactly_once(nodes):
    """avg divides where a move completes: each element of each node's result must pass
    through exactly one completion (its own, or copied from the node that did it)."""
    for length in _lengths(nodes):
        for steps in _plans("allreduce", nodes, length):
            state = [[0] * length for _ in range(nodes)]
            per_node = [steps.node_steps(i) for i in range(nodes)]
            for t in range(steps.steps):
                before = [row[:] for row in state]
                for i, node_steps in enumerate(per_node):
                    for m in node_steps[t].moves:
                        if m.to_scratch or m.from_scratch:
                            continue  # recursive doubling completes on the way back
                        (a, b), (c, d) = m.src, m.dst
                        if not m.accumulate:
                            state[i][c:d] = before[m.peer][a:b]
                        if m.completes:
                            state[i][c:d] = [x + 1 for x in state[i][c:d]]
                    for m in node_steps[t].moves:
                        if m.from_scratch and m.completes:
                            c, d = m.dst
                            state[i][c:d] = [x + 1 for x in state[i][c:d]]
            if nodes > 1:
                assert all(x == 1 for row in state for x in row), steps


@pytest.mark.parametrize("nodes", NODES)
def test_all_gather_copies_each_owned_range_unchanged(nodes):
    for length in _lengths(nodes):
        tagged = [[("junk", i, j) for j in range(length)] for i in range(nodes)]
        for i in range(nodes):
            a, b = chunk_range(length, nodes, owned_chunk(i, nodes))
            for j in range(a, b):
                tagged[i][j] = ("owned", i, j)
        for steps in _plans("all_gather", nodes, length):
            gathered = execute(steps, [row[:] for row in tagged], None)
            for i in range(nodes):
                for j in range(length):
                    assert gathered[i][j][0] == "owned" and gathered[i][j][2] == j, steps


_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


@pytest.mark.parametrize("op", sorted(_UFUNCS))
@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 7, 12])
def test_the_plan_on_float64_data_matches_numpy(nodes, op):
    rng = np.random.default_rng(nodes)
    for length in _lengths(nodes):
        inputs = rng.uniform(0.5, 2.0, (nodes, length)) * rng.choice([-1.0, 1.0], (nodes, length))
        expected = _REDUCE[op](inputs, axis=0)
        ufunc = _UFUNCS[op]
        for steps in _plans("allreduce", nodes, length):
            state = [list(row) for row in inputs]
            done = execute(steps, state, lambda a, b, f=ufunc: f(a, b))
            for row in done:
                np.testing.assert_allclose(row, expected, rtol=1e-12)


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 5, 6, 7, 8, 9, 16])
def test_what_a_node_sends_is_what_its_peer_receives(collective, nodes):
    """Each move from a peer's buffer is one of that peer's sends at the same step; the
    sends to one peer are in the order that peer applies the moves."""
    for length in _lengths(nodes):
        for steps in _plans(collective, nodes, length):
            per_node = [steps.node_steps(i) for i in range(nodes)]
            for t in range(steps.steps):
                expected = {i: [] for i in range(nodes)}
                for j in range(nodes):
                    for m in per_node[j][t].moves:
                        if not m.from_scratch:
                            assert m.peer != j and m.src == m.dst, steps
                            expected[m.peer].append((j, m.src))
                for i in range(nodes):
                    sends = sorted(per_node[i][t].sends, key=lambda send: send.peer)
                    assert [tuple(send) for send in sends] == expected[i], (steps, t)
                    assert i not in per_node[i][t].waits


def _textbook_chunk(phase, step, node, nodes):
    """The ring as the textbook states it, written here apart from the library: at step
    ``s`` node ``i`` receives chunk ``i - 1 - s`` (reduce-scatter) or ``i - s`` (all-gather)
    from its left neighbour."""
    return (node - 1 - step) % nodes if phase == "reduce_scatter" else (node - step) % nodes


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("nodes", [2, 3, 5, 65])
def test_the_rings_steps_and_nvtx_names_are_unchanged(collective, nodes):
    """The ring's plan, which the backends run, receives the textbook's chunks with their
    element ranges cut, and ring.ring_schedule, read off that plan, says the same."""
    schedule = ring_schedule(nodes)
    steps = plan(collective, nodes, 1000)
    phases = {"allreduce": ("reduce_scatter", "all_gather")}.get(collective, (collective,))
    expected = [(phase, s) for phase in phases for s in range(nodes - 1)]
    for i in range(nodes):
        transfers = schedule.for_node(i, phases)
        got = steps.node_steps(i)
        chunks = [_textbook_chunk(phase, s, i, nodes) for phase, s in expected]
        assert [s.name for s in got] == [f"{p} step {s} node {i}" for p, s in expected]
        assert [t.name for t in transfers] == [s.name for s in got]
        assert [t.chunk for t in transfers] == chunks
        assert all(len(s.moves) == len(s.sends) == 1 for s in got)
        assert [s.moves[0].peer for s in got] == [(i - 1) % nodes] * len(got)
        assert [t.src for t in transfers] == [(i - 1) % nodes] * len(got)
        assert [s.moves[0].dst for s in got] == [chunk_range(1000, nodes, c) for c in chunks]
        accumulates = [p == "reduce_scatter" for p, _ in expected]
        assert [s.moves[0].accumulate for s in got] == accumulates
        assert [t.accumulate for t in transfers] == accumulates
        assert [s.waits for s in got] == [()] + [(schedule.left(i),)] * (len(got) - 1)
        completes = [s.name for s in got if s.moves[0].completes]
        if collective == "all_gather":
            assert completes == []
        else:
            assert completes == [f"reduce_scatter step {nodes - 2} node {i}"]
            assert owned_chunk(i, nodes) == (i + 1) % nodes
            assert got[nodes - 2].moves[0].dst == chunk_range(1000, nodes, (i + 1) % nodes)


def test_other_algorithms_name_their_steps():
    steps = plan("allreduce", 3, 10, "recursive-doubling")
    names = [s.name for s in steps.node_steps(1)]
    assert names == [
        "recursive-doubling fold step 0 node 1",
        "recursive-doubling exchange step 0 node 1",
        "recursive-doubling exchange step 1 node 1",
        "recursive-doubling unfold step 0 node 1",
    ]


def test_scratch_holds_the_longest_range():
    for nodes in [1, 2, 3, 4, 7, 8]:
        for length in _lengths(nodes):
            for steps in _plans("allreduce", nodes, length):
                moves = [m for i in range(nodes) for s in steps.node_steps(i) for m in s.moves]
                longest = max((m.dst[1] - m.dst[0] for m in moves), default=0)
                assert steps.scratch_elements >= longest
                assert steps.uses_scratch == any(m.to_scratch for m in moves)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("allgather", 2, 3), ValueError, "unknown collective"),
        (("allreduce", 0, 3), ValueError, "nodes"),
        (("allreduce", 2, -1), ValueError, "length"),
        (("allreduce", 2.0, 3), TypeError, "nodes"),
        (
            ("allreduce", 2, 3, "tree"),
            ValueError,
            "unknown algorithm 'tree': expected one of ring,",
        ),
        (("reduce_scatter", 2, 3, "recursive-doubling"), ValueError, "has no reduce_scatter"),
        (("allreduce", 6, 3, "hierarchical", 0, 4), ValueError, "use one of 1, 2, 3, 6"),
        (("allreduce", 2, 3, "ring-segmented", -1), ValueError, "segment"),
    ],
)
def test_plan_refuses_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        plan(*args)


_CORE = {"schedule", "ops", "buffers", "communicator", "nvtx", "_optional", "machine", "auto"}
_ALLOWED = {
    "cpu": _CORE | {"cpu", "host", "planning"},
    # The GPU queues the API's async and out-of-place forms on its streams itself: its
    # handle is a ring.work.Work (ring.gpu.caller).
    "gpu": _CORE | {"gpu", "work", "planning"},
    "mpi": _CORE | {"mpi", "host", "planning"},
    "host": {"schedule", "ops", "machine", "host"},
    # The API's own forms: out of place (ring.place) and async (ring.work), over the core.
    "api": {"communicator", "place", "work"},
    "place": {"communicator"},
    "work": set(),
}


def _library_imports(source: Path) -> set[str]:
    """The top-level parts of ring (a module or package: cpu, schedule, ops...) that
    ``source`` imports, relative imports resolved from where it stands."""
    package = source.relative_to(Path(__file__).parent.parent).parent.parts
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = [*package[: len(package) - node.level + 1], *(node.module or "").split(".")]
            parts = [p for p in parts if p]
            names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            imported.update(names)
    return imported


@pytest.mark.parametrize("backend", sorted(_ALLOWED))
def test_backends_import_only_the_core(backend):
    """One level of backends over one core: no backend imports another (cpu and mpi share
    ring.host, the executor on host arrays), and the API reaches them only by name
    (ring.communicator.BACKENDS)."""
    ring_dir = Path(__file__).parent.parent / "ring"
    package = ring_dir / backend
    sources = sorted(package.glob("*.py")) if package.is_dir() else [ring_dir / f"{backend}.py"]
    assert sources
    imported = set().union(*(_library_imports(source) for source in sources))
    assert imported <= _ALLOWED[backend], imported - _ALLOWED[backend]


UNIT_LENGTHS = (2, 3, 5, 13, 101, 1009)  # plus N: lengths above N with unequal chunks


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 6, 8, 9])
def test_a_plan_of_whole_chunks_is_its_unit_mapped(collective, nodes):
    """The ring and every table-built algorithm: a plan longer than N has the moves of its
    unit (one element per chunk) with each range's ends moved to the chunk boundaries;
    ring-segmented and ring-bidirectional cut chunks, and have no unit."""
    for algorithm in ALGORITHMS:
        if collective not in ALGORITHM_COLLECTIVES[algorithm]:
            continue
        for length in (nodes + k for k in UNIT_LENGTHS):
            steps = plan(collective, nodes, length, algorithm)
            if algorithm in ("ring-segmented", "ring-bidirectional"):
                assert steps.unit is None
                continue
            assert steps.unit.length == nodes
            assert mapped_moves(steps.unit.moves, chunk_offsets(length, nodes)) == steps.moves
        assert plan(collective, nodes, nodes, algorithm).unit is None  # its own unit
        assert plan(collective, nodes, nodes - 1, algorithm).unit is None  # empty chunks


@pytest.mark.parametrize("nodes", [2, 3, 4, 8])
def test_plans_share_a_key_exactly_when_they_make_the_same_moves(nodes):
    """At N = 2, direct and hierarchical are the ring; keys tell the rest apart."""
    for length in (nodes - 1, nodes + 5, 1009):
        plans = [plan("allreduce", nodes, length, a) for a in ALGORITHMS]
        for a in plans:
            for b in plans:
                if (a.unit is None) == (b.unit is None):
                    assert (a.key == b.key) == (a.moves == b.moves), (a, b)
    assert plan("allreduce", 2, 1009, "direct").key == plan("allreduce", 2, 1009, "ring").key


def test_an_algorithm_whose_ranges_are_not_whole_chunks_gets_no_unit(monkeypatch):
    """The unit is taken only where mapping it gives the plan at a length of unequal
    chunks: ring-bidirectional's lanes cut each chunk in two."""
    monkeypatch.setattr(plans, "UNIT_ALGORITHMS", (*plans.UNIT_ALGORITHMS, "ring-bidirectional"))
    plans._unit.cache_clear()
    try:
        assert Plan("allreduce", 4, 103, "ring-bidirectional").unit is None
        assert Plan("allreduce", 4, 103, "ring").unit is not None
    finally:
        plans._unit.cache_clear()
