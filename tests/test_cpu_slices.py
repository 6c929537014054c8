"""``executor="slices"``: a plan run by position (ring/host/positions.py).
Results against the independent reference, bit for bit the node threads' results, how
many threads a call wakes, scratch that cannot be read by position, bad input, and a
failure on any thread ending the call.  (Ctrl-C mid-call: tests/test_cpu_faults.py.)"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from reference import check, ops_for, random_inputs
from test_cpu_algorithms import _options
from test_cpu_inline import _every_collective, _record_threads, assert_same_bits

import ring
from ring import CommunicatorClosedError, CpuCommunicator
from ring.host.positions import _read, _Scratch, by_position, slice_bounds
from ring.schedule import ALGORITHM_COLLECTIVES, ALGORITHMS, plan

DTYPES = [np.float32, np.int64, np.uint8, np.complex128]


@pytest.fixture
def small_tiles(monkeypatch):
    """Tiles of 5 elements: every call crosses tile and segment edges."""
    monkeypatch.setattr("ring.host.positions.tile_bytes", lambda: 40)


@pytest.mark.parametrize("threads", ["caller", "parts"])
# 5, 7 and 8 nodes in the full suite only (tests/tiers.py).
@pytest.mark.parametrize(
    "nodes", [1, 2, 3, 4, *(pytest.param(n, marks=pytest.mark.slow) for n in (5, 7, 8))]
)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_slices_match_the_reference(algorithm, nodes, threads, small_tiles):
    """Every collective, op and a dtype of each kind, lengths 0, 1, < N, primes; on the
    calling thread alone and split between it and the workers."""
    rng = np.random.default_rng(nodes * 13 + len(algorithm))
    options = _options(algorithm, nodes) | {"inline_bytes": 1 << 30 if threads == "caller" else 0}
    with CpuCommunicator(nodes, algorithm=algorithm, executor="slices", **options) as comm:
        for dtype in DTYPES:
            for op in ops_for(dtype):
                for count in sorted({0, 1, max(nodes - 1, 0), 13, 101}):
                    _every_collective(comm, rng, algorithm, dtype, op, count)
        assert (comm._crew.jobs == 0) == (threads == "caller" or nodes == 1 or comm.cores == 1)


# 5 and 8 nodes in the full suite only (tests/tiers.py).
@pytest.mark.parametrize(
    "nodes", [2, 3, 4, *(pytest.param(n, marks=pytest.mark.slow) for n in (5, 8))]
)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_slices_are_bit_for_bit_the_node_threads(algorithm, nodes, small_tiles, monkeypatch):
    """Same operations per element in the same order: same bits, for float sums whose value
    depends on the order, and for avg (its last touch)."""
    monkeypatch.setattr("ring.cpu.communicator._cores", lambda: 3)  # several parts even on one core
    rng = np.random.default_rng(nodes + 5 * len(algorithm))
    options = _options(algorithm, nodes) | {"inline_bytes": 0}
    make = CpuCommunicator
    with (
        make(nodes, algorithm=algorithm, executor="slices", **options) as sliced,
        make(nodes, algorithm=algorithm, **options) as threaded,
    ):
        assert_same_bits(sliced, threaded, rng)


@pytest.mark.slow  # every plan of every algorithm up to N = 8 (tests/tiers.py)
def test_every_plan_reads_by_position():
    """Every algorithm, collective and awkward length: the executor never has to fall back."""
    for algorithm in ALGORITHMS:
        for nodes in range(1, 10):
            for length in (0, 1, nodes - 1, 17, 1009):
                segment = 3 if algorithm == "ring-segmented" else 0
                for collective in ("allreduce", "all_gather"):
                    assert by_position(plan(collective, nodes, length, algorithm, segment))


@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 8])
def test_a_plan_with_a_unit_reads_by_position_as_its_unit_mapped(nodes):
    """Where a plan maps from its unit, so do its segments: the same as reading its moves
    (recursive doubling's scratch included)."""
    for algorithm in ALGORITHMS:
        for collective in ("allreduce", "reduce_scatter", "all_gather"):
            if collective not in ALGORITHM_COLLECTIVES[algorithm]:
                continue
            for length in (nodes + 1, 2 * nodes + 3, 101, 1009):
                steps = plan(collective, nodes, length, algorithm)
                assert by_position(steps) == _read(steps), (algorithm, collective, length)


def test_segments_cover_each_position_once_with_the_plans_moves():
    steps = plan("allreduce", 4, 10, "direct")
    segments = by_position(steps).segments
    assert [(s.start, s.stop) for s in segments] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    # direct: chunk 0's owner (node 3) adds the three others, then the three copy it.
    ops = segments[0].ops
    assert [(o.node, o.peer, o.accumulate) for o in ops[:3]] == [(3, 0, 1), (3, 1, 1), (3, 2, 1)]
    assert [(o.node, o.peer, o.accumulate) for o in ops[3:]] == [(0, 3, 0), (1, 3, 0), (2, 3, 0)]
    assert ops[2].completes and not ops[1].completes


def test_scratch_read_after_its_slot_was_overwritten_is_refused():
    """A scratch element holds the position it was written from; a later write of that
    position elsewhere in scratch means the slot no longer holds it."""
    scratch = _Scratch()
    scratch.write(0, 4, 10)  # offsets 0..3 <- positions 10..13
    assert scratch.position_of_read(0, 4) == 10
    assert scratch.position_of_read(1, 3) == 11
    scratch.write(8, 10, 12)  # positions 12, 13 again, at offsets 8, 9
    assert scratch.position_of_read(0, 2) == 10
    assert scratch.position_of_read(0, 4) is None
    assert scratch.position_of_read(4, 6) is None  # never written


@pytest.mark.parametrize(
    ("length", "parts", "tile"), [(0, 2, 5), (7, 3, 5), (100, 2, 7), (9, 4, 1)]
)
def test_slices_cut_whole_tiles_and_cover_everything(length, parts, tile):
    bounds = slice_bounds(length, parts, tile)
    assert len(bounds) == parts
    assert bounds[0][0] == 0 and bounds[-1][1] == length
    assert all(a == b for (_, a), (b, _) in itertools.pairwise(bounds))
    assert all(lo % tile == 0 or lo == length for lo, _ in bounds)


def test_threads_for_follows_inline_bytes_nodes_cores_and_tiles(small_tiles, monkeypatch):
    monkeypatch.setattr("ring.cpu.communicator._cores", lambda: 2)
    with CpuCommunicator(4, executor="slices", inline_bytes=100) as comm:
        assert [comm.threads_for(b) for b in (1, 100, 101)] == [1, 1, 2]
        assert comm.threads_for(101, executor="nodes") == 4
        assert comm.threads_for(101, inline_bytes=200) == 1
        monkeypatch.setattr("ring.host.positions.tile_bytes", lambda: 150)
        assert [comm.threads_for(b, inline_bytes=0) for b in (150, 151)] == [1, 2]
    with CpuCommunicator(1, executor="slices", inline_bytes=0) as comm:
        assert comm.threads_for(1 << 30) == 1


def test_a_large_call_splits_between_the_caller_and_one_worker(small_tiles, monkeypatch):
    monkeypatch.setattr("ring.cpu.communicator._cores", lambda: 2)
    seen = _record_threads(monkeypatch)
    with CpuCommunicator(4, executor="slices", inline_bytes=0) as comm:
        buffers = [np.full(1 << 16, i + 1.0) for i in range(4)]
        comm.allreduce(buffers)
        assert comm._crew.jobs == 1
    assert seen == {threading.current_thread().name, "ring-cpu-node0"}
    np.testing.assert_array_equal(buffers, np.full((4, 1 << 16), 10.0))


def test_the_api_takes_executor_per_call():
    rng = np.random.default_rng(3)
    inputs = random_inputs(rng, 3, 1009, np.float64, "sum")
    buffers = [a.copy() for a in inputs]
    ring.allreduce(buffers, "sum", executor="slices", inline_bytes=0)
    for buf in buffers:
        check(buf, inputs, "sum")


@pytest.mark.parametrize("value", ["threads", 1])
def test_a_bad_executor_is_refused_before_anything_moves(value):
    message = "unknown executor .* expected one of nodes, slices"
    with pytest.raises(ValueError, match=message):
        CpuCommunicator(2, executor=value)
    buffers = [np.full(5, i + 1.0) for i in range(2)]
    with pytest.raises(ValueError, match=message):
        ring.allreduce(buffers, executor=value)
    np.testing.assert_array_equal(buffers, [np.full(5, 1.0), np.full(5, 2.0)])


@pytest.mark.parametrize("where", ["caller", "worker"])
def test_a_failure_on_any_thread_ends_the_call_and_closes(where, monkeypatch):
    """The caller's slice fails, or a worker's: the error reaches the caller, every worker
    is joined, and the communicator refuses the next call."""
    monkeypatch.setattr("ring.cpu.communicator._cores", lambda: 2)
    monkeypatch.setattr("ring.host.positions.tile_bytes", lambda: 800)
    failing = "MainThread" if where == "caller" else "ring-cpu-node0"
    add = np.add

    def failing_add(a, b, out):
        if threading.current_thread().name == failing:
            raise FloatingPointError("injected")
        return add(a, b, out=out)

    comm = CpuCommunicator(3, executor="slices", inline_bytes=0)
    threads = list(comm._threads)
    monkeypatch.setattr("ring.cpu.checks.resolve_op", lambda op, dtype: failing_add)
    with pytest.raises(FloatingPointError, match="injected"):
        comm.allreduce([np.ones(10_000) for _ in range(3)])
    assert comm.closed
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(CommunicatorClosedError):
        comm.allreduce([np.ones(9) for _ in range(3)])
