"""The one plan every backend executes (:func:`ring.schedule.plan`), checked against
derivations of its own: a symbolic run on sets of contributions, a run on float64 data
compared with NumPy's reductions, and the pairing of what one node sends with what its
peer receives."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from ring.schedule import COLLECTIVES, chunk_range, owned_chunk, plan, ring_schedule

NODES = [1, 2, 3, 4, 7]
PRIMES = [2, 3, 5, 13, 101, 1009]


def _lengths(nodes):
    """Lengths below N (some nodes own an empty range), zero, and primes."""
    return sorted({0, *range(1, nodes), *PRIMES})


def _execute(collective, nodes, length, state, accumulate, on_complete=None):
    """Run the plan in lock step on per-element values; ``accumulate(mine, theirs)``;
    ``on_complete(node, values)`` sees the range of each step that ``completes`` it."""
    steps = plan(collective, nodes, length)
    per_node = [steps.node_steps(i) for i in range(nodes)]
    assert {len(s) for s in per_node} == {steps.steps}
    for t in range(steps.steps):
        # Every node reads before any writes: within a step no range is both read and
        # written (the hazard check of test_schedule.py), so this order is any order.
        incoming = [[state[s[t].recv_peer][j] for j in range(*s[t].recv)] for s in per_node]
        for i, s in enumerate(per_node):
            step = s[t]
            for j, value in zip(range(*step.recv), incoming[i], strict=True):
                state[i][j] = accumulate(state[i][j], value) if step.accumulate else value
            if step.completes and on_complete is not None:
                on_complete(i, [state[i][j] for j in range(*step.recv)])
    return state


def _union_once(mine, theirs):
    assert not mine & theirs, "a contribution reduced twice"
    return mine | theirs


@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 5, 7, 8, 12])
def test_every_contribution_is_reduced_exactly_once(nodes):
    everyone = frozenset(range(nodes))
    for length in _lengths(nodes):
        fresh = [[frozenset([i])] * length for i in range(nodes)]
        completed = []

        def complete(node, values, completed=completed):
            assert all(value == everyone for value in values)
            completed.append(node)

        full = _execute(
            "allreduce", nodes, length, [row[:] for row in fresh], _union_once, complete
        )
        assert sorted(completed) == (list(range(nodes)) if nodes > 1 else [])
        assert all(value == everyone for row in full for value in row), length
        scattered = _execute("reduce_scatter", nodes, length, [r[:] for r in fresh], _union_once)
        for i in range(nodes):
            a, b = chunk_range(length, nodes, owned_chunk(i, nodes))
            assert all(value == everyone for value in scattered[i][a:b]), (length, i)


@pytest.mark.parametrize("nodes", NODES)
def test_all_gather_copies_each_owned_range_unchanged(nodes):
    for length in _lengths(nodes):
        tagged = [[("junk", i, j) for j in range(length)] for i in range(nodes)]
        for i in range(nodes):
            a, b = chunk_range(length, nodes, owned_chunk(i, nodes))
            for j in range(a, b):
                tagged[i][j] = ("owned", i, j)
        gathered = _execute("all_gather", nodes, length, tagged, None)
        for i in range(nodes):
            for j in range(length):
                assert gathered[i][j][0] == "owned" and gathered[i][j][2] == j


_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
_REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


@pytest.mark.parametrize("op", sorted(_UFUNCS))
@pytest.mark.parametrize("nodes", NODES)
def test_the_plan_on_float64_data_matches_numpy(nodes, op):
    rng = np.random.default_rng(nodes)
    for length in _lengths(nodes):
        inputs = rng.uniform(0.5, 2.0, (nodes, length)) * rng.choice([-1.0, 1.0], (nodes, length))
        expected = _REDUCE[op](inputs, axis=0)
        state = [list(row) for row in inputs]
        ufunc = _UFUNCS[op]
        done = _execute("allreduce", nodes, length, state, lambda a, b, f=ufunc: f(a, b))
        for row in done:
            np.testing.assert_allclose(row, expected, rtol=1e-12)


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("nodes", NODES)
def test_what_a_node_sends_is_what_its_peer_receives(collective, nodes):
    for length in _lengths(nodes):
        steps = plan(collective, nodes, length)
        per_node = [steps.node_steps(i) for i in range(nodes)]
        for i in range(nodes):
            for t, step in enumerate(per_node[i]):
                peer = per_node[step.send_peer][t]
                assert peer.recv_peer == i
                assert peer.recv == step.send
                assert step.recv_peer != i


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("nodes", [2, 3, 5, 65])
def test_steps_keep_the_rings_order_and_nvtx_names(collective, nodes):
    """The plan is the ring schedule's transfers with their element ranges cut."""
    schedule = ring_schedule(nodes)
    steps = plan(collective, nodes, 1000)
    phases = {"allreduce": ("reduce_scatter", "all_gather")}.get(collective, (collective,))
    for i in range(nodes):
        transfers = schedule.for_node(i, phases)
        got = steps.node_steps(i)
        assert [s.name for s in got] == [t.name for t in transfers]
        assert [s.recv_peer for s in got] == [t.src for t in transfers]
        assert [s.recv for s in got] == [chunk_range(1000, nodes, t.chunk) for t in transfers]
        assert [s.accumulate for s in got] == [t.accumulate for t in transfers]
        completes = [s.name for s in got if s.completes]
        if collective == "all_gather":
            assert completes == []
        else:
            assert completes == [f"reduce_scatter step {nodes - 2} node {i}"]
            assert got[nodes - 2].recv == chunk_range(1000, nodes, owned_chunk(i, nodes))


def test_scratch_holds_the_longest_range():
    for nodes in NODES:
        for length in _lengths(nodes):
            steps = plan("allreduce", nodes, length)
            longest = max(
                (b - a for i in range(nodes) for (a, b) in (s.recv for s in steps.node_steps(i))),
                default=0,
            )
            assert steps.scratch_elements >= longest
            assert nodes == 1 or steps.scratch_elements == longest


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (("allgather", 2, 3), ValueError, "unknown collective"),
        (("allreduce", 0, 3), ValueError, "nodes"),
        (("allreduce", 2, -1), ValueError, "length"),
        (("allreduce", 2.0, 3), TypeError, "nodes"),
    ],
)
def test_plan_refuses_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        plan(*args)


_CORE = {"schedule", "ops", "buffers", "communicator", "nvtx_ranges", "_optional"}
_ALLOWED = {
    "cpu": _CORE,
    "gpu": _CORE | {"gpu_devices", "gpu_graphs", "gpu_kernels"},
    "mpi": _CORE | {"mpi_agree", "mpi_cuda"},
    "api": {"communicator"},
}


@pytest.mark.parametrize("backend", sorted(_ALLOWED))
def test_backends_import_only_the_core(backend):
    """One level of backends over one core: no backend imports another, and the API
    reaches them only by name (ring.api.BACKENDS)."""
    source = Path(__file__).parent.parent / "ring" / f"{backend}.py"
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            imported.add(node.module or "")
    imported.discard("")
    assert imported <= _ALLOWED[backend], imported - _ALLOWED[backend]
