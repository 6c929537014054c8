"""``avg`` (NCCL's ncclAvg): the sum divided by N, on every backend and in the harness.

Floating and complex results are held to float64 references; integer results must equal
the wrapped sum divided by N with the quotient truncated toward zero, exactly.
"""

from __future__ import annotations

import csv
import importlib.util
import shutil

import numpy as np
import pytest
from fakecuda import FakeCuda, fake_cupy

import ring
import ring.bench.ceilings
from ring.bench.__main__ import main
from ring.gpu import GpuCommunicator
from ring.ops import divide_by_nodes
from ring.schedule import chunk_range, owned_chunk

NODES = [1, 2, 3, 4]
INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64]


def _lengths(nodes):
    return sorted({0, *range(1, nodes), 13, 101})


def _truncated(total: int, nodes: int) -> int:
    quotient = abs(total) // nodes
    return -quotient if total < 0 else quotient


def _int_reference(inputs) -> np.ndarray:
    """Exact Python integers: the sum wrapped to the dtype, then divided, truncated."""
    dtype = inputs[0].dtype
    bits = dtype.itemsize * 8
    totals = [sum(int(a[j]) for a in inputs) % (1 << bits) for j in range(inputs[0].shape[0])]
    if dtype.kind == "i":
        totals = [t - (1 << bits) if t >= 1 << (bits - 1) else t for t in totals]
    return np.array([_truncated(t, len(inputs)) for t in totals], dtype=dtype)


def _float_inputs(rng, nodes, length, dtype):
    values = rng.uniform(0.5, 2.0, (nodes, length)) * rng.choice([-1.0, 1.0], (nodes, length))
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.uniform(-2.0, 2.0, (nodes, length))
    return [row.astype(dtype) for row in values]


def _int_inputs(rng, nodes, length, dtype):
    info = np.iinfo(dtype)
    return [
        rng.integers(max(info.min, -(2**40)), min(info.max, 2**40), length, endpoint=True).astype(
            dtype
        )
        for _ in range(nodes)
    ]


def _close_to_mean(result, inputs):
    expected = np.sum([a.astype(np.complex128) for a in inputs], axis=0) / len(inputs)
    eps = float(np.finfo(result.dtype).eps)
    scale = np.sum([np.abs(a.astype(np.complex128)) for a in inputs], axis=0) / len(inputs)
    assert np.all(np.abs(result - expected) <= (2 * len(inputs) + 1) * eps * scale + 1e-300)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_integer_division_truncates_toward_zero(dtype):
    info = np.iinfo(dtype)
    values = (
        np.array(
            sorted({info.min, info.min + 1, -7, -3, -1, 0, 1, 3, 7, info.max - 1, info.max}), dtype
        )
        if info.min < 0
        else np.array([0, 1, 3, 7, 200 % (info.max + 1), info.max], dtype)
    )
    for nodes in (1, 2, 3, 7, 127, 128, 200, 1024):
        got = values.copy()
        divide_by_nodes(got, nodes)
        assert got.dtype == values.dtype
        assert got.tolist() == [_truncated(int(v), nodes) for v in values], nodes


@pytest.mark.parametrize("sync", ["pairwise", "barrier"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
@pytest.mark.parametrize("nodes", NODES)
def test_cpu_allreduce_avg_matches_float64(nodes, dtype, sync):
    rng = np.random.default_rng(nodes)
    for length in _lengths(nodes):
        inputs = _float_inputs(rng, nodes, length, dtype)
        buffers = [a.copy() for a in inputs]
        ring.allreduce(buffers, "avg", sync=sync)
        for buf in buffers:
            _close_to_mean(buf, inputs)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("nodes", NODES)
def test_cpu_allreduce_avg_of_integers_is_exact(nodes, dtype):
    rng = np.random.default_rng([nodes, np.dtype(dtype).num])
    for length in _lengths(nodes):
        inputs = _int_inputs(rng, nodes, length, dtype)
        buffers = [a.copy() for a in inputs]
        ring.allreduce(buffers, "avg")
        expected = _int_reference(inputs)
        for buf in buffers:
            np.testing.assert_array_equal(buf, expected)


def test_negative_integer_averages_round_toward_zero():
    buffers = [np.array([-7, 7, -1], np.int32), np.array([0, 0, 0], np.int32)]
    ring.allreduce(buffers, "avg")
    assert buffers[0].tolist() == buffers[1].tolist() == [-3, 3, 0]


@pytest.mark.parametrize("nodes", NODES)
def test_reduce_scatter_avg_divides_each_owned_chunk_once(nodes):
    rng = np.random.default_rng(40 + nodes)
    for length in _lengths(nodes):
        inputs = _float_inputs(rng, nodes, length, np.float64)
        buffers = [a.copy() for a in inputs]
        ring.reduce_scatter(buffers, "avg")
        for node, buf in enumerate(buffers):
            a, b = chunk_range(length, nodes, owned_chunk(node, nodes))
            _close_to_mean(buf[a:b], [x[a:b] for x in inputs])


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8])
@pytest.mark.parametrize("nodes", NODES)
def test_gpu_allreduce_avg_on_the_simulator(nodes, dtype, force):
    """On one device and on several, through peer copies or not, eager and from a graph."""
    rng = np.random.default_rng(nodes * 3 + force)
    for devices in sorted({1, nodes}):
        sim = FakeCuda(devices, seed=nodes)
        with fake_cupy(sim):
            comm = GpuCommunicator(nodes, shared_devices=True, force_peer_copies=force)
            for length in _lengths(nodes):
                if np.dtype(dtype).kind == "f":
                    inputs = _float_inputs(rng, nodes, length, dtype)
                else:
                    inputs = _int_inputs(rng, nodes, length, dtype)
                for _ in range(3):  # eager, captured, replayed
                    buffers = [sim.to_device(a, comm.devices[i]) for i, a in enumerate(inputs)]
                    comm.allreduce(buffers, "avg")
                    for buf in buffers:
                        got = sim.to_host(buf)
                        if np.dtype(dtype).kind == "f":
                            _close_to_mean(got, inputs)
                        else:
                            np.testing.assert_array_equal(got, _int_reference(inputs))


@pytest.fixture
def small_ceilings(monkeypatch):
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: 1 << 20)


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
@pytest.mark.usefixtures("small_ceilings")
@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
def test_harness_validates_avg_on_the_host_backends(tmp_path, dtype, monkeypatch):
    from ring.bench.seed_cpp import build

    backends = "cpu,numpy-direct"
    if build.compiler_problem() is None and dtype in ("float32", "int32"):
        monkeypatch.setenv("RING_CACHE", str(tmp_path / "cache"))
        backends += ",seed-cpp"
    out = tmp_path / "avg.csv"
    args = ["-b", "4", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "--nodes", "1,3,4"]
    code = main([*args, "--backend", backends, "-d", dtype, "-o", "avg", "--out", str(out)])
    assert code == 0
    rows = _rows(out)
    assert {row["backend"] for row in rows} == set(backends.split(","))
    assert rows and all(row["op"] == "avg" and row["wrong"] == "0" for row in rows)


@pytest.mark.usefixtures("small_ceilings")
def test_the_harness_reference_catches_a_missing_division(tmp_path, monkeypatch):
    """A backend that sums instead of averaging is counted wrong."""
    monkeypatch.setattr("ring.bench.backends.numpy_direct.AVERAGING", frozenset())
    out = tmp_path / "wrong.csv"
    args = ["-b", "64", "-e", "64", "-n", "1", "-w", "0", "--nodes", "3"]
    assert main([*args, "--backend", "numpy-direct", "-o", "avg", "--out", str(out)]) == 1
    assert all(int(row["wrong"]) > 0 for row in _rows(out))


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found")
@pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed")
@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_mpi_backends_average_under_mpirun(tmp_path, dtype):
    from test_bench_mpi import mpirun

    out = tmp_path / "mpi.csv"
    done = mpirun(
        3, "--backend", "mpi-allreduce,mpi", "-b", "8", "-e", "4K", "-f", "8", "-n", "2",
        "-w", "1", "-d", dtype, "-o", "avg", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = _rows(out)
    assert {row["backend"] for row in rows} == {"mpi-allreduce", "mpi"}
    assert all(row["op"] == "avg" and row["wrong"] == "0" for row in rows)
