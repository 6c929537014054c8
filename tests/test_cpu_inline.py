"""Small calls on the CPU backend run their plan on the calling thread (``inline_bytes``):
results against the independent reference, bit for bit the worker threads' results, no
worker woken, the option that forces the threads, and failures ending the call as there.
(Ctrl-C mid-call: tests/test_cpu_faults.py; a failure mid-call: tests/test_cpu_algorithms.py.)"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from reference import ALL_DTYPES, check, ops_for, random_inputs
from test_cpu_algorithms import _options

import ring
from ring import CommunicatorClosedError, CpuCommunicator
from ring.cpu import INLINE_BYTES
from ring.schedule import ALGORITHM_COLLECTIVES, ALGORITHMS, chunk_range, owned_chunk, plan

PRIMES = [2, 3, 13, 101]
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.complex128]


def _record_threads(monkeypatch):
    """Replace every op's ufunc with one that notes the thread it runs on."""
    seen = set()

    def recorded(op, dtype):
        ufunc = resolve(op, dtype)

        def run(a, b, out):
            seen.add(threading.current_thread().name)
            return ufunc(a, b, out=out)

        return run

    resolve = ring.cpu.checks.resolve_op
    monkeypatch.setattr("ring.cpu.checks.resolve_op", recorded)
    return seen


# 5 to 8 nodes in the full suite only (tests/tiers.py).
@pytest.mark.parametrize(
    "nodes", [*range(1, 5), *(pytest.param(n, marks=pytest.mark.slow) for n in (5, 6, 7, 8))]
)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_inline_calls_match_the_reference(algorithm, nodes):
    """Every collective, op and a float, integer and complex dtype of each width class."""
    rng = np.random.default_rng(nodes * 31 + len(algorithm))
    options = _options(algorithm, nodes)
    with CpuCommunicator(nodes, algorithm=algorithm, **options) as comm:
        for dtype in DTYPES:
            for op in ops_for(dtype):
                for count in sorted({0, 1, max(nodes - 1, 0), *PRIMES}):
                    _every_collective(comm, rng, algorithm, dtype, op, count)
        assert comm._crew.jobs == 0


def _every_collective(comm, rng, algorithm, dtype, op, count):
    nodes = comm.nodes
    inputs = random_inputs(rng, nodes, count, dtype, op)
    buffers = [a.copy() for a in inputs]
    comm.allreduce(buffers, op)
    for buf in buffers:
        check(buf, inputs, op)
    bounds = [chunk_range(count, nodes, owned_chunk(i, nodes)) for i in range(nodes)]
    if "reduce_scatter" in ALGORITHM_COLLECTIVES[algorithm]:
        buffers = [a.copy() for a in inputs]
        comm.reduce_scatter(buffers, op)
        for buf, (a, b) in zip(buffers, bounds, strict=True):
            check(buf[a:b], [x[a:b] for x in inputs], op)
    buffers = [a.copy() for a in inputs]
    comm.all_gather(buffers)
    for buf in buffers:
        for i, (a, b) in enumerate(bounds):
            np.testing.assert_array_equal(buf[a:b], inputs[i][a:b])


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_and_op_inline(dtype):
    rng = np.random.default_rng(17)
    for op in ops_for(dtype):
        for nodes, count in [(3, 1009), (5, 64), (7, 6)]:
            inputs = random_inputs(rng, nodes, count, dtype, op)
            buffers = [a.copy() for a in inputs]
            ring.allreduce(buffers, op, algorithm=ALGORITHMS[len(op) % len(ALGORITHMS)])
            for buf in buffers:
                check(buf, inputs, op)


# 5, 7 and 8 nodes in the full suite only (tests/tiers.py).
@pytest.mark.parametrize(
    "nodes", [2, 3, 4, *(pytest.param(n, marks=pytest.mark.slow) for n in (5, 7, 8))]
)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_inline_is_bit_for_bit_the_threaded_result(algorithm, nodes, monkeypatch):
    """Same plan, same operations in the same order per element: same bits, for float
    sums whose value depends on the order, and for avg (its last touch)."""
    monkeypatch.setattr("ring.host.positions.tile_bytes", lambda: 40)  # direct: many tiles
    rng = np.random.default_rng(nodes + 7 * len(algorithm))
    options = _options(algorithm, nodes)
    make = CpuCommunicator
    with (
        make(nodes, algorithm=algorithm, **options) as inline,
        make(nodes, algorithm=algorithm, inline_bytes=0, **options) as threaded,
    ):
        assert_same_bits(inline, threaded, rng)
        assert (inline._crew.jobs, threaded._crew.jobs) == (0, 9)


def assert_same_bits(ours_comm, theirs_comm, rng):
    """Both communicators give the same bits on float sums whose value depends on the
    order, avg (its last touch) and float16 prod, at lengths from N + 1 to 4099."""
    nodes = ours_comm.nodes
    for dtype, op in [(np.float32, "sum"), (np.float64, "avg"), (np.float16, "prod")]:
        for count in (nodes + 1, 1001, 4099):
            inputs = [rng.standard_normal(count).astype(dtype) for _ in range(nodes)]
            ours = [a.copy() for a in inputs]
            theirs = [a.copy() for a in inputs]
            ours_comm.allreduce(ours, op)
            theirs_comm.allreduce(theirs, op)
            for a, b in zip(ours, theirs, strict=True):
                assert a.tobytes() == b.tobytes(), (dtype, op, count)


def test_a_small_call_runs_on_the_caller_and_wakes_no_worker(monkeypatch):
    seen = _record_threads(monkeypatch)
    with CpuCommunicator(4) as comm:
        comm.allreduce([np.ones(1000) for _ in range(4)])
        assert comm._crew.jobs == 0
        assert seen == {threading.current_thread().name}
        assert all(t.is_alive() for t in comm.threads)  # there, idle


@pytest.mark.parametrize("where", ["communicator", "api"])
def test_inline_bytes_zero_forces_the_threads(where, monkeypatch):
    seen = _record_threads(monkeypatch)
    buffers = [np.ones(1000) for _ in range(4)]
    if where == "api":
        comm = ring.get_communicator(4)
        before = comm._crew.jobs
        ring.allreduce(buffers, inline_bytes=0)
        assert comm._crew.jobs == before + 1
    else:
        with CpuCommunicator(4, inline_bytes=0) as comm:
            comm.allreduce(buffers)
            assert comm._crew.jobs == 1
    assert seen == {f"ring-cpu-node{i}" for i in range(4)}
    np.testing.assert_array_equal(buffers, np.full((4, 1000), 4.0))


def test_the_threshold_is_bytes_per_node_inclusive():
    itemsize = np.dtype(np.float32).itemsize
    with CpuCommunicator(2) as comm:
        comm.allreduce([np.ones(INLINE_BYTES // itemsize, np.float32) for _ in range(2)])
        assert comm._crew.jobs == 0
        comm.allreduce([np.ones(INLINE_BYTES // itemsize + 1, np.float32) for _ in range(2)])
        assert comm._crew.jobs == 1
    with CpuCommunicator(2, inline_bytes=64) as comm:
        comm.allreduce([np.ones(8) for _ in range(2)])  # 64 bytes
        comm.allreduce([np.ones(9) for _ in range(2)])
        assert comm._crew.jobs == 1
        assert "inline_bytes=64" in repr(comm)


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [(-1, ValueError, "inline_bytes must be >= 0"), (1.5, TypeError, "inline_bytes must be an")],
)
def test_a_bad_inline_bytes_is_refused_before_anything_moves(value, error, message):
    with pytest.raises(error, match=message):
        CpuCommunicator(2, inline_bytes=value)
    buffers = [np.full(5, i + 1.0) for i in range(2)]
    with pytest.raises(error, match=message):
        ring.allreduce(buffers, inline_bytes=value)
    np.testing.assert_array_equal(buffers, [np.full(5, 1.0), np.full(5, 2.0)])


def test_a_closed_communicator_refuses_a_small_call():
    comm = CpuCommunicator(2)
    comm.close()
    buffers = [np.ones(3) for _ in range(2)]
    with pytest.raises(CommunicatorClosedError):
        comm.allreduce(buffers)
    np.testing.assert_array_equal(buffers, np.ones((2, 3)))


def test_inline_steps_carry_the_threaded_nvtx_names_in_step_order(monkeypatch):
    import ring.nvtx as nr

    events = []
    monkeypatch.setattr(nr, "_make", lambda m: lambda: events.append(m))
    monkeypatch.setattr(nr, "AVAILABLE", True)  # a tool takes the ranges
    monkeypatch.setattr(nr, "_CALL_RANGES", {})  # built anew with the recorder
    with CpuCommunicator(3, algorithm="rabenseifner") as comm:
        comm.allreduce([np.full(7, i + 1.0) for i in range(3)])
    steps = plan("allreduce", 3, 7, "rabenseifner")
    names = [steps.node_steps(i)[t].name for t in range(steps.steps) for i in range(3)]
    assert events == ["allreduce", *names]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_no_step_reads_what_another_node_writes_at_that_step(algorithm):
    """What makes node-after-node execution of a step valid, on plans of the lengths that
    run inline (tests/test_schedule.py checks it on short ones): per step, no range a node
    writes in its buffer overlaps a range another node reads from that buffer."""
    for nodes in (2, 3, 4, 5, 8):
        for length in (INLINE_BYTES // 8, INLINE_BYTES // 2 + 1):
            segment = length // 5 if algorithm == "ring-segmented" else 0
            steps = plan("allreduce", nodes, length, algorithm, segment)
            for t in range(steps.steps):
                writes: dict[int, list] = {i: [] for i in range(nodes)}
                reads: dict[int, list] = {i: [] for i in range(nodes)}
                for i in range(nodes):
                    for m in steps.node_steps(i)[t].moves:
                        if not m.to_scratch:
                            writes[i].append(m.dst)
                        if not m.from_scratch and m.peer != i:
                            reads[m.peer].append(m.src)
                for owner in range(nodes):
                    for wa, wb in writes[owner]:
                        assert all(rb <= wa or wb <= ra for ra, rb in reads[owner]), (t, owner)


# -- the harness -----------------------------------------------------------------------------


@pytest.fixture
def quick_harness(monkeypatch):
    monkeypatch.setattr("ring.bench.ceilings.host_array_bytes", lambda: 1 << 20)
    for name in ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)


def test_the_harness_measures_each_inline_bytes_and_rows_say_who_ran(tmp_path, quick_harness):
    """``--inline-bytes 1K,0``: two series; a row that ran inline counts one thread (the
    caller, never pinned), the others the N workers."""
    from ring.bench.__main__ import main
    from ring.bench.placement import machine_cores
    from ring.bench.results import read_csv

    out = tmp_path / "run.csv"
    args = ["--backend", "cpu", "--nodes", "4", "-b", "256", "-e", "4K", "-f", "4", "-n", "2"]
    assert main([*args, "-w", "1", "--inline-bytes", "1K,0", "--out", str(out)]) == 0
    columns, rows = read_csv(out)
    assert {"inline_bytes", "inline"} <= set(columns)
    cores = len(machine_cores())
    workers = {
        (r["inline_bytes"], r["bytes"]): (r["inline"], round(float(r["threads_per_core"]) * cores))
        for r in rows
    }
    assert workers == {
        ("1024", "256"): ("1", 1),
        ("1024", "1024"): ("1", 1),
        ("1024", "4096"): ("0", 4),
        ("0", "256"): ("0", 4),
        ("0", "1024"): ("0", 4),
        ("0", "4096"): ("0", 4),
    }
    assert all(r["wrong"] == "0" for r in rows)


@pytest.mark.parametrize("value", ["-1", "lots", "1K,"])
def test_a_bad_inline_bytes_flag_is_one_line(value, tmp_path, capsys, quick_harness):
    from ring.bench.__main__ import main

    assert (
        main(["--backend", "cpu", "--inline-bytes", value, "--out", str(tmp_path / "r.csv")]) == 2
    )
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--inline-bytes" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_the_report_names_a_series_run_with_another_inline_bytes():
    from ring.report.derive.series import label

    base = {"backend": "cpu", "sync": "pairwise", "algorithm": "ring", "executor": "nodes"}
    rows = [
        {**base, "inline_bytes": v, "inline": i} for v, i in ((INLINE_BYTES, 1), (0, 0), (1024, 1))
    ]
    assert [label(r) for r in rows] == [
        "cpu ring (nodes, inline)",
        "cpu ring (nodes, threads, inline_bytes=0)",
        "cpu ring (nodes, inline, inline_bytes=1024)",
    ]
