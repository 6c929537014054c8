"""The threaded CPU backend against the independent reference."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import ALL_DTYPES, check, ops_for, random_inputs

import ring
from ring import CommunicatorClosedError, CpuCommunicator, owned_chunk
from ring.schedule import chunk_range

SYNCS = ["pairwise", "barrier"]
PRIMES = [2, 3, 5, 7, 11, 13, 17, 31, 97, 1009]


@pytest.fixture(autouse=True)
def _threaded(monkeypatch):
    """These tests cover the worker threads: no call runs inline unless it asks
    (tests/test_cpu_inline.py covers the calling thread)."""
    monkeypatch.setattr("ring.cpu.checks.INLINE_BYTES", 0)


def _copies(inputs):
    return [a.copy() for a in inputs]


@st.composite
def cases(draw):
    nodes = draw(st.integers(1, 16))
    count = draw(
        st.one_of(
            st.sampled_from([0, 1, *PRIMES]),
            st.integers(0, nodes - 1),
            st.integers(0, 5000),
        )
    )
    dtype = draw(st.sampled_from(ALL_DTYPES))
    op = draw(st.sampled_from(ops_for(dtype)))
    sync = draw(st.sampled_from(SYNCS))
    seed = draw(st.integers(0, 2**32 - 1))
    return nodes, count, np.dtype(dtype), op, sync, seed


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_allreduce_matches_reference(case):
    nodes, count, dtype, op, sync, seed = case
    inputs = random_inputs(np.random.default_rng(seed), nodes, count, dtype, op)
    buffers = _copies(inputs)
    ring.allreduce(buffers, op, sync=sync)
    for buf in buffers:
        check(buf, inputs, op)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("sync", SYNCS)
def test_every_dtype_and_op(dtype, sync):
    rng = np.random.default_rng(7)
    for op in ops_for(dtype):
        for nodes, count in [(3, 1009), (4, 3), (5, 64)]:
            inputs = random_inputs(rng, nodes, count, dtype, op)
            buffers = _copies(inputs)
            ring.allreduce(buffers, op, sync=sync)
            for buf in buffers:
                check(buf, inputs, op)


@pytest.mark.slow
@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_a_few_million_elements(nodes, sync):
    rng = np.random.default_rng(nodes)
    count = 3_000_017  # prime: uneven chunks
    inputs = random_inputs(rng, nodes, count, np.float32, "sum")
    buffers = _copies(inputs)
    ring.allreduce(buffers, "sum", sync=sync)
    for buf in buffers:
        check(buf, inputs, "sum")


@pytest.mark.slow  # 64 threads per call (tests/tiers.py)
@pytest.mark.parametrize("sync", SYNCS)
def test_sixty_four_nodes(sync):
    rng = np.random.default_rng(64)
    for count in [0, 5, 63, 64, 65, 1000]:
        inputs = random_inputs(rng, 64, count, np.float64, "sum")
        buffers = _copies(inputs)
        ring.allreduce(buffers, sync=sync)
        for buf in buffers:
            check(buf, inputs, "sum")


def test_one_node_is_a_no_op():
    buf = np.arange(1, 8, dtype=np.float32)
    before = buf.copy()
    for op in ring.ops.ARITHMETIC:
        ring.allreduce([buf], op)
    ring.reduce_scatter([buf])
    ring.all_gather([buf])
    np.testing.assert_array_equal(buf, before)


@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("count", [0, 1, 2, 6, 13, 1000])
def test_reduce_scatter_leaves_each_owned_chunk_reduced(nodes, count, sync):
    rng = np.random.default_rng(count * 31 + nodes)
    for op in ["sum", "max"]:
        inputs = random_inputs(rng, nodes, count, np.float64, op)
        buffers = _copies(inputs)
        ring.reduce_scatter(buffers, op, sync=sync)
        for node, buf in enumerate(buffers):
            a, b = chunk_range(count, nodes, owned_chunk(node, nodes))
            check(buf[a:b], [x[a:b] for x in inputs], op)


@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("count", [0, 1, 2, 6, 13, 1000])
def test_all_gather_only_copies(nodes, count, sync):
    rng = np.random.default_rng(count * 17 + nodes)
    # NaN payloads and -0.0 survive a copy bit for bit but not an accumulation.
    buffers = [rng.standard_normal(count) for _ in range(nodes)]
    owned = []
    for node, buf in enumerate(buffers):
        a, b = chunk_range(count, nodes, owned_chunk(node, nodes))
        buf[a:b] = rng.standard_normal(b - a)
        if b > a:
            buf[a] = np.nan if node % 2 else -0.0
        owned.append((a, b, buf[a:b].copy()))
    ring.all_gather(buffers, sync=sync)
    for buf in buffers:
        for a, b, chunk in owned:
            assert buf[a:b].tobytes() == chunk.tobytes()


def test_communicator_is_reused_across_calls_and_phases():
    with CpuCommunicator(4) as comm:
        threads = list(comm._threads)
        rng = np.random.default_rng(1)
        for count in [10, 1001, 3]:
            inputs = random_inputs(rng, 4, count, np.int64, "sum")
            buffers = _copies(inputs)
            comm.reduce_scatter(buffers)
            comm.all_gather(buffers)
            for buf in buffers:
                check(buf, inputs, "sum")
            assert comm._threads == threads
            assert all(t.is_alive() for t in threads)
    assert comm.closed
    assert not any(t.is_alive() for t in threads)


def test_closed_communicator_refuses_work():
    comm = CpuCommunicator(3)
    comm.close()
    comm.close()  # idempotent
    with pytest.raises(CommunicatorClosedError, match="closed"):
        comm.allreduce([np.ones(4) for _ in range(3)])


def test_communicator_checks_node_count():
    with CpuCommunicator(3) as comm, pytest.raises(ValueError, match="3 nodes but 2 buffers"):
        comm.allreduce([np.ones(4), np.ones(4)])


def test_thread_per_node():
    before = set(threading.enumerate())
    with CpuCommunicator(5, sync="barrier") as comm:
        new = set(threading.enumerate()) - before
        assert sorted(t.name for t in new) == [f"ring-cpu-node{i}" for i in range(5)]
        assert comm.nodes == 5 and comm.sync == "barrier"
    assert not set(threading.enumerate()) - before


def test_cached_communicator_is_replaced_after_close():
    first = ring.get_communicator(3)
    assert ring.get_communicator(3) is first
    first.close()
    second = ring.get_communicator(3)
    assert second is not first and not second.closed
    buffers = [np.full(5, i + 1.0) for i in range(3)]
    ring.allreduce(buffers)
    np.testing.assert_array_equal(buffers[0], np.full(5, 6.0))


def test_a_repeated_module_call_runs_after_its_communicator_closes():
    """Repeated ``ring.allreduce`` calls go straight to the communicator the first ran on;
    once it closes, the next call makes another and stays right."""
    rng = np.random.default_rng(11)
    inputs = [rng.uniform(-1, 1, 37) for _ in range(3)]
    for _ in range(3):
        for _ in range(2):
            buffers = [x.copy() for x in inputs]
            ring.allreduce(buffers, "max", algorithm="direct")
            np.testing.assert_array_equal(buffers[2], np.maximum.reduce(inputs))
        ring.get_communicator(3).close()
    assert not ring.get_communicator(3).closed


def test_an_out_of_place_call_leaves_its_inputs_untouched():
    # recv takes the result: the buffers passed in are read, never written.
    rng = np.random.default_rng(3)
    inputs = random_inputs(rng, 4, 101, np.float32, "sum")
    buffers = _copies(inputs)
    recv = [np.empty_like(x) for x in inputs]
    ring.allreduce(buffers, recv=recv)
    for buf, original, out in zip(buffers, inputs, recv, strict=True):
        np.testing.assert_array_equal(buf, original)
        check(out, inputs, "sum")


class Boom(RuntimeError):
    pass


def _fail_at(comm, node, step, collective="allreduce"):
    """Make ``node`` raise when it enters ``step`` of ``collective`` (a test seam: the
    per-step range pusher is the first thing a step runs)."""
    pushers = list(comm._pushers[node][collective])

    def explode():
        raise Boom(f"node {node} failed at step {step}")

    pushers[step] = explode
    comm._pushers[node][collective] = tuple(pushers)


@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize(
    ("nodes", "node", "step"), [(2, 0, 0), (2, 1, 1), (3, 2, 1), (4, 0, 3), (4, 3, 5), (4, 1, 2)]
)
def test_failing_worker_stops_everyone(nodes, node, step, sync):
    comm = CpuCommunicator(nodes, sync=sync)
    threads = list(comm._threads)
    _fail_at(comm, node, step)
    buffers = [np.ones(1000) for _ in range(nodes)]
    start = time.monotonic()
    with pytest.raises(Boom, match=f"node {node} failed at step {step}"):
        comm.allreduce(buffers)
    assert time.monotonic() - start < 1.0
    assert comm.closed
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(CommunicatorClosedError):
        comm.allreduce(buffers)


def test_failure_inside_the_reduction_reaches_the_caller(monkeypatch):
    comm = CpuCommunicator(3)

    def failing_add(a, b, out):
        if threading.current_thread().name == "ring-cpu-node2":
            raise FloatingPointError("injected")
        return np.add(a, b, out=out)

    monkeypatch.setattr("ring.cpu.checks.resolve_op", lambda op, dtype: failing_add)
    with pytest.raises(FloatingPointError, match="injected"):
        comm.allreduce([np.ones(9) for _ in range(3)])
    assert comm.closed


def test_nvtx_ranges_name_every_step(monkeypatch):
    import ring.nvtx as nr

    events = []
    lock = threading.Lock()

    def recorder(message):
        def push():
            with lock:
                events.append((threading.current_thread().name, message))

        return push

    monkeypatch.setattr(nr, "_make", recorder)
    monkeypatch.setattr(nr, "AVAILABLE", True)  # a tool takes the ranges
    monkeypatch.setattr(nr, "_CALL_RANGES", {})  # built anew with the recorder
    nodes = 3
    with CpuCommunicator(nodes) as comm:
        comm.allreduce([np.ones(7) for _ in range(nodes)])
    assert events.count(("MainThread", "allreduce")) == 1
    for node in range(nodes):
        mine = [m for name, m in events if name == f"ring-cpu-node{node}"]
        assert mine == [f"reduce_scatter step {s} node {node}" for s in range(nodes - 1)] + [
            f"all_gather step {s} node {node}" for s in range(nodes - 1)
        ]
