"""Every algorithm on the threaded CPU backend against the independent reference, and
``algorithm=`` refused before anything moves when it names no algorithm or option."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from reference import check, random_inputs

import ring
from ring import CommunicatorClosedError, CpuCommunicator, owned_chunk
from ring.schedule import ALGORITHM_COLLECTIVES, ALGORITHMS, chunk_range

PRIMES = [2, 3, 13, 101]


@pytest.fixture(autouse=True)
def _threaded(monkeypatch):
    """These tests cover the worker threads: no call runs inline unless it asks
    (tests/test_cpu_inline.py covers the calling thread)."""
    monkeypatch.setattr("ring.cpu.checks.INLINE_BYTES", 0)


def _options(algorithm, nodes):
    """Small blocks for ring-segmented (several passes over a short buffer); groups of two
    or three for hierarchical where they divide N."""
    if algorithm == "ring-segmented":
        return {"segment_bytes": 8 * max(1, 2 * nodes - 1)}
    if algorithm == "hierarchical":
        return {"group_size": next((d for d in (2, 3) if nodes % d == 0), 1)}
    return {}


# Up to 8 nodes in the quick tier; 9 to 16 in the full suite (tests/tiers.py).
@pytest.mark.parametrize(
    "nodes", [*range(1, 9), *(pytest.param(n, marks=pytest.mark.slow) for n in range(9, 17))]
)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_collective_matches_the_reference(algorithm, nodes):
    rng = np.random.default_rng(nodes * 101 + len(algorithm))
    options = _options(algorithm, nodes)
    sync = "barrier" if nodes % 3 == 0 else "pairwise"
    have = ALGORITHM_COLLECTIVES[algorithm]
    for count in sorted({0, 1, max(nodes - 1, 0), *PRIMES}):
        inputs = random_inputs(rng, nodes, count, np.float64, "sum")
        buffers = [a.copy() for a in inputs]
        ring.allreduce(buffers, "sum", sync=sync, algorithm=algorithm, **options)
        for buf in buffers:
            check(buf, inputs, "sum")
        bounds = [chunk_range(count, nodes, owned_chunk(i, nodes)) for i in range(nodes)]
        if "reduce_scatter" in have:
            buffers = [a.copy() for a in inputs]
            ring.reduce_scatter(buffers, "max", sync=sync, algorithm=algorithm, **options)
            for buf, (a, b) in zip(buffers, bounds, strict=True):
                check(buf[a:b], [x[a:b] for x in inputs], "max")
        buffers = [a.copy() for a in inputs]
        ring.all_gather(buffers, sync=sync, algorithm=algorithm, **options)
        for buf in buffers:
            for i, (a, b) in enumerate(bounds):
                np.testing.assert_array_equal(buf[a:b], inputs[i][a:b])


@pytest.fixture(scope="module")
def large_inputs():
    """3,000,017 elements (prime: uneven chunks) on 3 nodes (not a power of two), per
    dtype and op, made once for every algorithm."""
    rng = np.random.default_rng(3)
    return {
        (dtype, op): random_inputs(rng, 3, 3_000_017, dtype, op)
        for dtype in DTYPES
        for op in ring.ops.ARITHMETIC
    }


DTYPES = (np.float32, np.float64, np.int32, np.int64)


# Every op on every algorithm; the four dtypes in two pairs (a float and an integer of
# different widths), alternating between algorithms, so each dtype meets every op on at
# least three algorithms and the file stays within a minute here.
@pytest.mark.slow
@pytest.mark.parametrize(
    ("algorithm", "dtypes"),
    [(a, DTYPES[0::3] if k % 2 else DTYPES[1:3]) for k, a in enumerate(ALGORITHMS)],
)
def test_three_million_elements_every_op_and_dtype(algorithm, dtypes, large_inputs):
    # Integers are checked exactly against Python integers on a sample (and every chunk
    # edge): the exact reference of all three million would take minutes here.
    edges = [x for c in range(3) for x in chunk_range(3_000_017, 3, c)]
    sample = np.unique(
        np.r_[np.random.default_rng(0).integers(0, 3_000_017, 4000), edges[:-1], edges[-1] - 1]
    )
    options = {"segment_bytes": 1 << 16} if algorithm == "ring-segmented" else {}
    with CpuCommunicator(3, algorithm=algorithm, **options) as comm:
        for (dtype, op), inputs in large_inputs.items():
            if dtype not in dtypes:
                continue
            buffers = [a.copy() for a in inputs]
            comm.allreduce(buffers, op)
            for buf in buffers:
                if np.dtype(dtype).kind == "i":
                    check(buf[sample], [x[sample] for x in inputs], op)
                else:
                    check(buf, inputs, op)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"algorithm": "tree"}, "unknown algorithm 'tree': expected one of ring, ring-segmented"),
        ({"algorithm": "ring", "segment_bytes": 4096}, "option 'segment_bytes' is not one of"),
        ({"algorithm": "ring-segmented", "segment_bytes": 0}, "segment_bytes must be >= 1"),
        ({"algorithm": "hierarchical", "group_size": 4}, "use one of 1, 2, 3, 6"),
        ({"algorithm": "direct", "group_size": 2}, "option 'group_size' is not one of"),
    ],
)
def test_bad_algorithms_and_options_are_refused_before_anything_moves(options, message):
    inputs = random_inputs(np.random.default_rng(1), 6, 50, np.float64, "sum")
    buffers = [a.copy() for a in inputs]
    threads = threading.active_count()
    with pytest.raises(ValueError, match=message):
        ring.allreduce(buffers, **options)
    with pytest.raises(ValueError, match=message):
        CpuCommunicator(6, **options)
    with pytest.raises(ValueError, match=message):
        ring.get_communicator(6, **options)
    assert threading.active_count() == threads
    for buf, original in zip(buffers, inputs, strict=True):
        np.testing.assert_array_equal(buf, original)


def test_an_algorithm_without_the_collective_says_which_have_it():
    buffers = [np.ones(8) for _ in range(4)]
    with pytest.raises(ValueError, match="'recursive-doubling' has no reduce_scatter: use one of"):
        ring.reduce_scatter(buffers, algorithm="recursive-doubling")
    with CpuCommunicator(4, algorithm="recursive-doubling") as comm, pytest.raises(ValueError):
        comm.reduce_scatter(buffers)
    np.testing.assert_array_equal(buffers, np.ones((4, 8)))


def test_a_communicators_algorithm_runs_and_names_its_steps(monkeypatch):
    import ring.nvtx as nr

    events = []
    lock = threading.Lock()

    def recorder(message):
        def push():
            with lock:
                events.append((threading.current_thread().name, message))

        return push

    monkeypatch.setattr(nr, "_make", recorder)
    monkeypatch.setattr(nr, "_CALL_RANGES", {})  # built anew with the recorder
    with CpuCommunicator(3, algorithm="rabenseifner") as comm:
        assert "rabenseifner" in repr(comm)
        buffers = [np.full(7, i + 1.0) for i in range(3)]
        comm.allreduce(buffers)
    np.testing.assert_array_equal(buffers, np.full((3, 7), 6.0))
    mine = [m for name, m in events if name == "ring-cpu-node1"]
    assert mine == [
        "rabenseifner fold step 0 node 1",
        "rabenseifner reduce_scatter step 0 node 1",
        "rabenseifner all_gather step 0 node 1",
        "rabenseifner unfold step 0 node 1",
    ]
    assert all(nr.STEP_RANGE.match(m)["algorithm"] == "rabenseifner" for m in mine)


@pytest.mark.parametrize("inline", [False, True], ids=["threads", "inline"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_failure_inside_any_algorithm_stops_everyone(algorithm, inline, monkeypatch):
    """Node 2's thread fails (node 0's in reduce-broadcast, where only node 0 reduces and
    every other node waits for it), or inline the calling thread's third reduction: either
    way the error reaches the caller, every worker is joined and the communicator refuses
    the next call."""
    calls = []
    failing = "ring-cpu-node0" if algorithm == "reduce-broadcast" else "ring-cpu-node2"

    def failing_add(a, b, out):
        calls.append(threading.current_thread().name)
        if len(calls) == 3 if inline else calls[-1] == failing:
            raise FloatingPointError("injected")
        return np.add(a, b, out=out)

    comm = CpuCommunicator(5, algorithm=algorithm, inline_bytes=1 << 20 if inline else 0)
    threads = list(comm._threads)
    monkeypatch.setattr("ring.cpu.checks.resolve_op", lambda op, dtype: failing_add)
    with pytest.raises(FloatingPointError, match="injected"):
        comm.allreduce([np.ones(99) for _ in range(5)])
    assert comm.closed
    assert not any(t.is_alive() for t in threads)
    assert ({"MainThread"} == set(calls)) == inline
    with pytest.raises(CommunicatorClosedError):
        comm.allreduce([np.ones(99) for _ in range(5)])
