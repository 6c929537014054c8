"""A repeated call on the calling thread runs bound to its buffers (ring/host/moves.py), by
either executor: right against the independent reference and bit for bit the node threads'
result on every repeat, by nodes with every node's step range, checked again in full
whenever a buffer, the list or the op changed, re-planned when ``auto`` picks another
algorithm, and releasing its buffers on close.  (Ctrl-C inside a bound call:
tests/test_cpu_faults.py.)"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import weakref

import numpy as np
import pytest
from reference import check, ops_for, random_inputs
from test_cpu_algorithms import _options
from test_cpu_inline import assert_same_bits

from ring import CpuCommunicator
from ring.host.moves import run_ranged
from ring.schedule import ALGORITHMS, plan


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 5 elements: a bound call crosses tile and segment edges."""
    monkeypatch.setattr("ring.host.positions.tile_bytes", lambda: 40)


EXECUTORS = ("slices", "nodes")


def _sliced(
    nodes: int, algorithm: str = "ring", executor: str = "slices", **options
) -> CpuCommunicator:
    options = _options(algorithm, nodes) | options
    return CpuCommunicator(nodes, algorithm=algorithm, executor=executor, **options)


@pytest.mark.parametrize("executor", EXECUTORS)
# 5 nodes in the full suite only (tests/tiers.py).
@pytest.mark.parametrize("nodes", [2, 3, 4, pytest.param(5, marks=pytest.mark.slow)])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_repeated_call_runs_bound_and_stays_right(algorithm, nodes, executor, small_tiles):
    rng = np.random.default_rng(7 * nodes + len(algorithm))
    with _sliced(nodes, algorithm, executor) as comm:
        for dtype in (np.float32, np.int64):
            for op in ops_for(np.dtype(dtype)):
                inputs = [(rng.standard_normal(23) * 9).astype(dtype) for _ in range(nodes)]
                inputs = [np.where(x == 0, 1, x).astype(dtype) for x in inputs]
                buffers = [x.copy() for x in inputs]
                bound = None
                for _ in range(3):
                    for buffer, x in zip(buffers, inputs, strict=True):
                        buffer[...] = x
                    comm.allreduce(buffers, op)
                    for buffer in buffers:
                        check(buffer, inputs, op)
                    bound = bound or comm._bound["allreduce"]
                    assert comm._bound["allreduce"] is bound  # the repeats took it
        # Bit for bit the node threads, on the repeat as on the first call.
        with CpuCommunicator(nodes, algorithm=algorithm, **_options(algorithm, nodes)) as nodes_:
            assert_same_bits(comm, nodes_, rng)
            assert_same_bits(comm, nodes_, np.random.default_rng(3))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_changed_buffer_list_or_op_is_checked_again(executor):
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]
    with _sliced(3, "direct", executor) as comm:
        buffers = [x.copy() for x in inputs]
        comm.allreduce(buffers)
        bound = comm._bound["allreduce"]

        # Read-only now: refused before anything moves, like a first call.
        buffers = [x.copy() for x in inputs]
        comm.allreduce(buffers)
        buffers[2].flags.writeable = False
        before = [b.copy() for b in buffers]
        with pytest.raises(ValueError, match=r"buffers\[2\] is read-only"):
            comm.allreduce(buffers)
        assert all(np.array_equal(a, b) for a, b in zip(buffers, before, strict=True))

        # One buffer short: the communicator's node count, checked before any binding.
        with pytest.raises(ValueError, match="has 3 nodes but 2 buffers"):
            comm.allreduce(buffers[:2])

        # Reshaped in place: not the bound call; reduced as its elements in memory order.
        buffers = [x.copy() for x in inputs]
        comm.allreduce(buffers)
        again = buffers[0] * len(buffers)  # every buffer holds the same sum: exact
        buffers[1].shape = (8, 8)
        comm.allreduce(buffers)
        assert all(np.array_equal(b.reshape(-1), again) for b in buffers)

        # Another dtype through the same objects (a view in place): planned for it.
        buffers = [x.copy() for x in inputs]
        comm.allreduce(buffers)
        ints = [np.arange(64, dtype=np.int32) * (i + 2) for i in range(3)]
        for buffer, x in zip(buffers, ints, strict=True):
            buffer.dtype = np.int32
            buffer[...] = x
        comm.allreduce(buffers)
        for buffer in buffers:
            check(buffer, ints, "sum")

        # The same objects in another order, and another op: bound again, still right.
        buffers = [x.copy() for x in inputs]
        comm.allreduce(buffers)
        swapped = [buffers[1], buffers[0], buffers[2]]
        for buffer, x in zip(swapped, inputs, strict=True):
            buffer[...] = x
        comm.allreduce(swapped, "max")
        for buffer in swapped:
            check(buffer, inputs, "max")
        assert comm._bound["allreduce"] is not bound
        assert comm._bound["allreduce"].op == "max"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_call_on_the_workers_is_bound_too_and_never_stale(executor, small_tiles, monkeypatch):
    """Above inline_bytes the call runs on the workers: bound to its buffers as well (its
    job made once), replaced by a call on other buffers, right on every repeat."""
    monkeypatch.setattr("ring.cpu.communicator._cores", lambda: 2)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(1024).astype(np.float32) for _ in range(2)]
    with _sliced(2, executor=executor, inline_bytes=1024) as comm:
        for _ in range(3):
            buffers = [x.copy() for x in inputs]
            comm.allreduce(buffers)
            for buf in buffers:
                check(buf, inputs, "sum")
        workers = comm._bound["allreduce"]
        again = [x.copy() for x in inputs]
        comm.allreduce(again)
        assert comm._bound["allreduce"] is not workers  # other buffers: bound anew
        comm.allreduce(again)
        assert comm._bound["allreduce"] is not workers
        kept = comm._bound["allreduce"]
        before = [a.copy() for a in again]
        comm.allreduce(again)  # the repeat takes the bound call: the sum of the sums
        assert comm._bound["allreduce"] is kept
        for buf in again:
            check(buf, before, "sum")
        comm.allreduce([b[:256] for b in again])  # on the caller: bound in its place
        assert comm._bound["allreduce"].run is not workers.run


@pytest.mark.parametrize("algorithm", ["rabenseifner", "reduce-broadcast"])
def test_a_bound_call_by_nodes_marks_every_node_step_as_the_first_call_did(algorithm, monkeypatch):
    import ring.nvtx as nr

    events = []
    monkeypatch.setattr(nr, "AVAILABLE", True)  # a tool takes the ranges
    monkeypatch.setattr(nr, "_make", lambda m: lambda: events.append(m))
    monkeypatch.setattr(nr, "pop", lambda: events.append(None))
    monkeypatch.setattr(nr, "_CALL_RANGES", {})  # built anew with the recorder
    buffers = [np.full(7, i + 1.0) for i in range(3)]
    with CpuCommunicator(3, algorithm=algorithm) as comm:
        comm.allreduce(buffers)
        first, events[:] = list(events), []
        comm.allreduce(buffers)
        assert comm._bound["allreduce"].run.func is run_ranged  # bound, node after node
    assert events == first
    steps = plan("allreduce", 3, 7, algorithm)
    names = [steps.node_steps(i)[t].name for t in range(steps.steps) for i in range(3)]
    assert [e for e in events if e is not None] == ["allreduce", *names]
    assert events.count(None) == len(names) + 1  # every range closed


@pytest.mark.parametrize("executor", EXECUTORS)
def test_auto_is_bound_to_its_pick_and_planned_again_once_picks_are_reset(executor, monkeypatch):
    """A table's pick (planning="estimate") is cached until ring.auto.reset: a bound auto
    call is planned again only then, and runs another algorithm if the pick changed."""
    from ring import auto

    asked = []
    picks = iter(["direct", "direct", "ring", "ring"])

    def resolve(backend, name, nodes, nbytes, algorithm, inline=None):
        asked.append(algorithm)
        return next(picks) if algorithm == "auto" else algorithm

    monkeypatch.setattr("ring.cpu.planned.resolve_algorithm", resolve)
    monkeypatch.setattr("ring.cpu.communicator.auto_generation", auto.generation)
    monkeypatch.setattr("ring.cpu.execution.auto_generation", auto.generation)
    inputs = [np.arange(10, dtype=np.float64) + i for i in range(3)]
    buffers = [x.copy() for x in inputs]
    with _sliced(3, "auto", executor, planning="estimate") as comm:
        for expected, reset in (("direct", False), ("direct", False), ("direct", True)):
            if reset:
                auto.reset()  # asked again: still direct
            for buffer, x in zip(buffers, inputs, strict=True):
                buffer[...] = x
            comm.allreduce(buffers)
            assert comm._bound["allreduce"].algorithm == expected
        assert len(asked) == 2  # the first call, and the one after the reset
        auto.reset()
        comm.allreduce(buffers)  # ring now: planned again
        assert comm._bound["allreduce"].algorithm == "ring"
        assert len(asked) == 3
        for buffer, x in zip(buffers, inputs, strict=True):
            buffer[...] = x
        comm.allreduce(buffers)
        for buffer in buffers:
            check(buffer, inputs, "sum")
    auto.reset()


def test_close_lets_the_bound_buffers_go():
    buffers = [np.ones(100, np.float32) for _ in range(2)]
    watched = weakref.ref(buffers[0])
    comm = _sliced(2)
    comm.allreduce(buffers)
    del buffers
    gc.collect()
    assert watched() is not None  # the bound call's views hold it
    comm.close()
    gc.collect()
    assert watched() is None


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("inline_bytes", [0, 1 << 20])  # on the workers, on the caller
def test_unbind_lets_the_last_buffers_go_and_the_next_call_binds_again(executor, inline_bytes):
    rng = np.random.default_rng(3)
    comm = _sliced(3, executor=executor, inline_bytes=inline_bytes)
    with comm:
        for _ in range(2):  # the second call runs bound
            buffers = [rng.standard_normal(1000).astype(np.float32) for _ in range(3)]
            watched = [weakref.ref(b) for b in buffers]
            comm.allreduce(buffers)
        comm.unbind()
        del buffers
        gc.collect()
        assert [w() for w in watched] == [None] * 3  # not held by a bound call nor a worker
        buffers = [rng.standard_normal(7).astype(np.float32) + 1 for _ in range(3)]
        inputs = [b.copy() for b in buffers]
        for _ in range(2):
            comm.allreduce(buffers)
            for buffer in buffers:
                check(buffer, inputs, "sum")
            inputs = [b.copy() for b in buffers]


def test_unbind_lets_the_scratch_sized_to_the_buffers_go():
    """Recursive doubling by nodes lands whole buffers in scratch: unbind drops it with the
    buffers (at 1 GiB a sweep's series would each keep N GiB), and the next call is right."""
    rng = np.random.default_rng(8)
    with _sliced(3, "recursive-doubling", "nodes", inline_bytes=0) as comm:
        inputs = random_inputs(rng, 3, 5000, np.float64, "sum")
        buffers = [x.copy() for x in inputs]
        comm.allreduce(buffers)
        kept = [weakref.ref(a) for a in comm._crew.scratch if a is not None]
        assert kept
        comm.unbind()
        gc.collect()
        assert [k() for k in kept] == [None] * len(kept)
        buffers = [x.copy() for x in inputs]
        comm.allreduce(buffers)
        for buffer in buffers:
            check(buffer, inputs, "sum")


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_plan_of_more_moves_than_bound_moves_runs_unbound(executor, monkeypatch):
    """Binding keeps a view per move: a plan of many (a ring on 1,024 nodes has two
    million) runs unbound, and right."""
    buffers = [np.full(10, i + 1.0) for i in range(2)]
    for limit, bound in ((3, False), (4, True)):  # the ring on 2 nodes: 2 steps, 4 moves
        monkeypatch.setattr("ring.host.moves.BOUND_MOVES", limit)
        with _sliced(2, executor=executor) as comm:
            for _ in range(2):
                for i, buffer in enumerate(buffers):
                    buffer[...] = i + 1.0
                comm.allreduce(buffers)
                assert all((b == 3.0).all() for b in buffers)
            assert ("allreduce" in comm._bound) == bound


_RESIZE = """
import json, sys
import numpy as np
from ring import CpuCommunicator
from ring.schedule import ALGORITHMS

outcomes = []
for executor in ("nodes", "slices"):
    for algorithm in ALGORITHMS:
        options = {"group_size": 2} if algorithm == "hierarchical" else {}
        rng = np.random.default_rng(0)
        comm = CpuCommunicator(4, algorithm=algorithm, executor=executor, **options)
        buffers = [rng.uniform(0.5, 2.0, 200_000) for _ in range(4)]
        for _ in range(2):
            comm.allreduce(buffers)
        try:
            for b in buffers:
                b.resize(100_000, refcheck=False)
            outcome = "resized"
        except ValueError as exc:
            outcome = "refused: " + str(exc).splitlines()[0]
        inputs = [rng.uniform(0.5, 2.0, buffers[0].size) for _ in range(4)]
        for b, x in zip(buffers, inputs):
            b[...] = x
        comm.allreduce(buffers)
        right = all(np.allclose(b, np.sum(inputs, axis=0)) for b in buffers)
        comm.close()
        outcomes.append([executor, algorithm, outcome, right])
print(json.dumps(outcomes))
"""


def test_resizing_a_bound_buffer_is_refused_and_the_next_call_is_right():
    """``ndarray.resize(refcheck=False)`` after two bound calls would free the memory the
    bound views point at: NumPy refuses it while the call is bound, by every executor and
    algorithm (run in a subprocess: the defect was a crash)."""
    done = subprocess.run(
        [sys.executable, "-c", _RESIZE], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    for executor, algorithm, outcome, right in json.loads(done.stdout):
        assert outcome.startswith("refused: cannot resize"), (executor, algorithm, outcome)
        assert right, (executor, algorithm)


def test_a_closed_communicator_lets_its_bound_buffers_be_resized():
    buffers = [np.ones(1000) for _ in range(2)]
    with CpuCommunicator(2) as comm:
        for _ in range(2):
            comm.allreduce(buffers)
        with pytest.raises(ValueError, match="cannot resize"):
            buffers[0].resize(10, refcheck=False)
    buffers[0].resize(10, refcheck=False)
    assert buffers[0].shape == (10,)
