"""CUDA graphs in the GPU ring (ring.gpu.graphs), on the CUDA simulator.

The simulator (``fakecuda``) captures the way CUDA does: work queued on a
capturing stream, or on a stream that joined the capture by waiting on an event recorded
in it, is recorded instead of run; a wait on an event from outside the capture, or a stream
whose last work the origin does not wait for, makes the capture fail; a replay runs the
captured work again on its own streams, ordered only by the captured waits, in random
order.  A graph that missed a dependency, or baked in the wrong pointers, gives wrong
results here.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from fakecuda import CUDARuntimeError, FakeCuda, fake_cupy
from reference import check, random_inputs

from ring.gpu import GpuCommunicator, cache_key


def write(sim, buffer, values: np.ndarray) -> None:
    """New inputs into an existing device buffer (the host writes while nothing is queued)."""
    view, _ = sim.resolve(buffer.data.ptr, buffer.nbytes)
    view[:] = np.ascontiguousarray(values).view(np.uint8)


def run(sim, comm, buffers, rng, op="sum", count=None):
    count = buffers[0].size if count is None else count
    inputs = random_inputs(rng, comm.nodes, count, buffers[0].dtype, op)
    for buf, values in zip(buffers, inputs, strict=True):
        write(sim, buf, values)
    comm.allreduce(buffers, op)
    for buf in buffers:
        check(sim.to_host(buf), inputs, op)


def allocate(sim, comm, count, dtype=np.float32):
    return [sim.to_device(np.zeros(count, dtype), d) for d in comm.devices]


@pytest.mark.parametrize(("nodes", "devices"), [(2, 1), (4, 1), (3, 3), (8, 2)])
@pytest.mark.parametrize("force", [False, True])
def test_captured_once_then_replayed_with_fresh_inputs(nodes, devices, force):
    rng = np.random.default_rng(nodes + devices)
    for seed in range(3):
        sim = FakeCuda(devices, seed=seed)
        with fake_cupy(sim):
            comm = GpuCommunicator(nodes, shared_devices=True, force_peer_copies=force)
            buffers = allocate(sim, comm, 1001)
            for _ in range(6):
                run(sim, comm, buffers, rng)
            # first call eager, second captured (and launched), then replays
            assert (comm.graphs.captures, comm.graphs.replays) == (1, 4)
            assert sim.graph_launches == 5
            assert comm.last_elapsed_ms() > 0


def test_a_change_of_buffers_size_op_or_collective_captures_again():
    rng = np.random.default_rng(5)
    sim = FakeCuda(1, seed=1)
    with fake_cupy(sim):
        comm = GpuCommunicator(4, shared_devices=True)
        a, b = allocate(sim, comm, 997), allocate(sim, comm, 997)
        for buffers in (a, a, b, b, a, b, a, b):
            run(sim, comm, buffers, rng)
        assert (comm.graphs.captures, comm.graphs.replays) == (2, 4)
        for op in ("max", "max", "max"):
            run(sim, comm, a, rng, op)
        assert (comm.graphs.captures, comm.graphs.replays) == (3, 5)
        shorter = [buf[:500] for buf in a]  # same pointers, another count
        for _ in range(3):
            run(sim, comm, shorter, rng)
        assert (comm.graphs.captures, comm.graphs.replays) == (4, 6)
        inputs = random_inputs(rng, 4, 997, np.float32, "sum")
        for _ in range(2):
            for buf, values in zip(a, inputs, strict=True):
                write(sim, buf, values)
            comm.reduce_scatter(a, "sum")
        assert comm.graphs.captures == 5


def test_graphs_false_never_captures():
    rng = np.random.default_rng(2)
    sim = FakeCuda(2, seed=2)
    with fake_cupy(sim):
        comm = GpuCommunicator(4, shared_devices=True, graphs=False)
        buffers = allocate(sim, comm, 333)
        for _ in range(4):
            run(sim, comm, buffers, rng)
    assert sim.graph_launches == 0 and comm.graphs.captures == 0
    assert cache_key(4, graphs=False) != cache_key(4)
    with pytest.raises(TypeError, match="graphs must be True or False"):
        cache_key(4, graphs=1)


@pytest.mark.parametrize("where", ["begin", "end"])
def test_a_failed_capture_warns_once_and_runs_eagerly(where):
    rng = np.random.default_rng(3)
    sim = FakeCuda(1, seed=3, capture_fails=where)
    with fake_cupy(sim):
        comm = GpuCommunicator(4, shared_devices=True)
        buffers = allocate(sim, comm, 1000)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(5):
                run(sim, comm, buffers, rng)
    graph_warnings = [w for w in caught if "CUDA graph capture" in str(w.message)]
    assert len(graph_warnings) == 1
    assert "cudaError" in str(graph_warnings[0].message)
    assert comm.graphs.broken and sim.graph_launches == 0


def test_an_isolation_error_inside_the_capture_falls_back_without_touching_buffers(monkeypatch):
    """A capture invalidated halfway (here: a wait on an outside event) leaves nothing run."""
    rng = np.random.default_rng(4)
    sim = FakeCuda(1, seed=4)
    with fake_cupy(sim) as cp:
        comm = GpuCommunicator(2, shared_devices=True)
        outside = cp.cuda.Event(disable_timing=True)
        outside.record(comm.first_streams[1])
        buffers = allocate(sim, comm, 100)
        run(sim, comm, buffers, rng)  # eager
        original = comm._steps

        def steps_waiting_outside(fork, *args):
            comm.first_streams[0].wait_event(outside)
            return original(fork, *args)

        monkeypatch.setattr(comm, "_steps", steps_waiting_outside)
        with pytest.warns(RuntimeWarning, match="cudaErrorStreamCaptureIsolation"):
            run(sim, comm, buffers, rng)
        monkeypatch.undo()
        assert not comm.first_streams[0].is_capturing()
        run(sim, comm, buffers, rng)


# -- the simulator's capture rules -----------------------------------------------------------


def test_simulator_capture_needs_fork_and_join():
    sim = FakeCuda(1)
    with fake_cupy(sim) as cp:
        origin, other = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
        fork, join = cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)
        seen = []
        origin.begin_capture()
        fork.record(origin)
        other.wait_event(fork)  # joins the capture
        other.enqueue(("run", lambda: seen.append("captured")))
        join.record(other)
        with pytest.raises(CUDARuntimeError, match="Unjoined"):
            origin.end_capture()  # the origin never waited for `other`
        origin.begin_capture()
        fork.record(origin)
        other.wait_event(fork)
        other.enqueue(("run", lambda: seen.append("captured")))
        join.record(other)
        origin.wait_event(join)
        graph = origin.end_capture()
        assert seen == [] and not other.is_capturing()
        graph.launch(stream=origin)
        graph.launch(stream=origin)
        origin.synchronize()
        assert seen == ["captured", "captured"]


def test_simulator_refuses_an_outside_event_and_sync_during_capture():
    sim = FakeCuda(1)
    with fake_cupy(sim) as cp:
        stream = cp.cuda.Stream(non_blocking=True)
        outside = cp.cuda.Event(disable_timing=True)
        outside.record(cp.cuda.Stream(non_blocking=True))
        stream.begin_capture()
        with pytest.raises(CUDARuntimeError, match="Isolation"):
            stream.wait_event(outside)
        with pytest.raises(CUDARuntimeError, match="Invalidated"):
            stream.end_capture()
        stream.begin_capture()
        with pytest.raises(CUDARuntimeError, match="Unsupported"):
            stream.synchronize()
        with pytest.raises(CUDARuntimeError, match="Invalidated"):
            stream.end_capture()
        with pytest.raises(RuntimeError, match="legacy"):
            sim.legacy_stream(0).begin_capture()


# -- the harness: --graphs 0,1 and the report ------------------------------------------------


@pytest.fixture
def small_ceilings(monkeypatch):
    """Host and device ceilings on 64 KiB buffers (test_gpu_bench's): the simulator moves
    bytes with NumPy, and these tests read no ceiling."""
    import ring.bench.ceilings
    import ring.bench.gpu_ceilings

    small = 64 << 10
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: small)
    monkeypatch.setattr(ring.bench.gpu_ceilings, "ceiling_bytes", lambda max_bytes, size: small)
    ring.bench.gpu_ceilings._ceiling_cache.clear()


@pytest.mark.slow
@pytest.mark.usefixtures("small_ceilings")
def test_harness_measures_graphs_on_and_off_and_the_report_tells_them_apart(tmp_path, capsys):
    import csv

    import ring.bench.backends.gpu  # noqa: F401 - registers the gpu backend
    from ring.bench.__main__ import main as bench_main
    from ring.report import build_report

    out = tmp_path / "gpu.csv"
    sweep = ["-b", "1K", "-e", "4K", "-f", "2", "-n", "3", "-w", "2", "--seed", "1"]
    args = [*sweep, "--backend", "gpu", "--nodes", "2,4", "--shared-devices", "1"]
    with fake_cupy(FakeCuda(1, seed=7)):
        assert bench_main([*args, "--graphs", "0,1", "--out", str(out)]) == 0
        assert bench_main([*args, "--graphs", "2", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--graphs takes 0, 1 or a comma list" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    points = {(r["nodes"], r["graphs"], r["bytes"]) for r in rows}
    assert points == {
        (n, g, b) for n in ("2", "4") for g in ("0", "1") for b in ("1024", "2048", "4096")
    }
    assert all(r["wrong"] == "0" for r in rows)
    built = build_report([out], figures_dir=tmp_path / "f", out_dir=tmp_path / "r")
    text = built.appendix.read_text(encoding="utf-8")
    assert "# gpu ring (CUDA graphs), N = 4 (gpu)" in text
    assert "# gpu ring, N = 4 (gpu)" in text
    assert (
        "**All logical nodes on one GPU.** `gpu` placed several nodes" in built.markdown.read_text()
    )


@pytest.mark.usefixtures("small_ceilings")
def test_merge_keeps_rows_that_differ_only_in_graphs(tmp_path):
    import ring.bench.backends.gpu  # noqa: F401
    from ring.bench.__main__ import main as bench_main

    sweep = ["-b", "1K", "-e", "1K", "-n", "2", "-w", "1", "--backend", "gpu", "--nodes", "2"]
    sweep += ["--shared-devices", "1"]
    with fake_cupy(FakeCuda(1, seed=8)):
        for g in ("0", "1"):
            assert bench_main([*sweep, "--graphs", g, "--out", str(tmp_path / f"g{g}.csv")]) == 0
        assert bench_main([*sweep, "--graphs", "1", "--out", str(tmp_path / "again.csv")]) == 0
    merged = tmp_path / "m.csv"
    pair = [str(tmp_path / "g0.csv"), str(tmp_path / "g1.csv")]
    assert bench_main(["merge", "--out", str(merged), *pair]) == 0
    same = [str(tmp_path / "g1.csv"), str(tmp_path / "again.csv")]
    assert bench_main(["merge", "--out", str(tmp_path / "bad.csv"), *same]) == 2


def test_an_error_inside_the_capture_ends_it_before_propagating(monkeypatch):
    rng = np.random.default_rng(9)
    sim = FakeCuda(1, seed=9)
    with fake_cupy(sim):
        comm = GpuCommunicator(2, shared_devices=True)
        buffers = allocate(sim, comm, 64)
        run(sim, comm, buffers, rng)  # eager; the next call captures

        def broken(*args):
            raise KeyError("a bug inside the steps")

        monkeypatch.setattr(comm, "_steps", broken)
        with pytest.raises(KeyError):
            comm.allreduce(buffers, "sum")
        monkeypatch.undo()
        assert not any(s.is_capturing() for s in comm.first_streams)
        assert comm.graphs.broken is None  # not a capture failure: graphs stay on
