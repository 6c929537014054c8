"""MPI figures comparable with OSU / IMB: every rank's time of every call, a call's time
taken across ranks as ``-a`` says, OSU's ``-f`` statistics (min/avg/max over ranks of each
rank's mean) in the CSV; ``--buffers device`` for the MPI backends (``osu_allreduce -d
cuda``), refused with one line where MPI is not CUDA-aware or CuPy is missing."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import types

import numpy as np
import pytest
from test_bench_mpi import mpirun, read_rows

from ring.bench.__main__ import _known_syncs
from ring.bench.backends import CpuSession, MpiSession, available_backends
from ring.bench.backends.mpi_device import device_session
from ring.bench.cli import parse_args
from ring.bench.world import LocalWorld

MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(
    MPIRUN is None or importlib.util.find_spec("mpi4py") is None,
    reason="needs mpirun (apt-get install openmpi-bin) and mpi4py (pip install '.[mpi]')",
)


def config_of(*args: str):
    backends = available_backends()
    return parse_args(list(args), backends, _known_syncs(backends))


class _RecordedWorld(LocalWorld):
    """Four ranks whose per-call times are given, as the gather over ranks returns them."""

    local_size = 4

    def __init__(self, times: np.ndarray):
        self.recorded = times

    def gather_rows(self, values):
        assert np.array_equal(values, self.recorded[0])  # this rank's own times
        return self.recorded


@pytest.mark.parametrize(("average", "reduce"), [("0", None), ("1", "mean"), ("3", "max")])
def test_mpi_session_times_and_osu_columns(average, reduce):
    rng = np.random.default_rng(11)
    recorded = rng.uniform(1e-6, 1e-3, size=(4, 7))
    session = MpiSession(4, "none", config_of("-a", average), _RecordedWorld(recorded))
    session._times = list(recorded[0])
    times = session.times()
    expected = recorded[0] if reduce is None else getattr(np, reduce)(recorded, axis=0)
    assert times == pytest.approx(list(expected), rel=1e-12)
    means = [sum(map(float, rank)) / 7 * 1e6 for rank in recorded]
    extras = session.row_extras()
    assert extras.pop("buffers") == "host"
    assert extras == pytest.approx(
        {
            "rank_mean_us_min": min(means),
            "rank_mean_us_avg": sum(means) / 4,
            "rank_mean_us_max": max(means),
        }
    )


def _fake_cupy(used: list) -> types.ModuleType:
    """A CuPy stand-in over NumPy: enough for device buffers, recording the device used."""
    cupy = types.ModuleType("cupy")
    cupy.asarray = np.array
    cupy.empty_like = np.empty_like
    cupy.copyto = np.copyto
    cupy.asnumpy = np.array
    stream = types.SimpleNamespace(synchronize=lambda: used.append("sync"))
    device = types.SimpleNamespace(use=lambda: used.append("use"))
    cupy.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 2),
        Device=lambda index: used.append(("device", index)) or device,
        get_current_stream=lambda: stream,
    )
    return cupy


def test_device_buffers_restore_reduce_and_copy_back(monkeypatch):
    used: list = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(used))
    config = config_of("--backend", "mpi", "--buffers", "device", "-d", "float64")
    session_class = device_session(CpuSession, config)
    assert session_class is not CpuSession
    rng = np.random.default_rng(3)
    inputs = [rng.uniform(-1, 1, 33) for _ in range(3)]
    with session_class(3, "pairwise", config, LocalWorld()) as session:
        session.load(inputs)
        for _ in range(2):  # restore makes each call reduce the same inputs
            session.restore()
            session.timed_call()
            session.keep_sample([(0, 4), (30, 33)])
        results = session.results()
        samples = session.take_samples()
    reference = np.sum(np.array(inputs, dtype=np.float64), axis=0)
    for result in results:
        np.testing.assert_allclose(result, reference, rtol=1e-12)
    assert len(samples) == 2
    for sample in samples:
        for kept in sample:
            np.testing.assert_allclose(kept, reference[[0, 1, 2, 3, 30, 31, 32]], rtol=1e-12)
    assert used[:2] == [("device", 0), "use"] and "sync" in used
    assert device_session(CpuSession, config_of()) is CpuSession


@pytest.mark.slow
@pytest.mark.mpi
@needs_mpi
def test_mpi_rows_carry_the_osu_statistics(tmp_path):
    out = tmp_path / "mpi.csv"
    args = ["--backend", "mpi-allreduce,mpi", "-b", "64", "-e", "1K", "-f", "4", "-n", "4"]
    done = mpirun(2, *args, "-w", "1", "-a", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = read_rows(out)
    assert {row["backend"] for row in rows} == {"mpi-allreduce", "mpi"}
    for row in rows:
        low, mean, high = (float(row[f"rank_mean_us_{k}"]) for k in ("min", "avg", "max"))
        assert 0 < low <= mean <= high


def _refused_with_one_line(tmp_path, args: list[str], env: dict, message: str) -> None:
    """The harness under ``mpirun -n 2`` with ``args`` refuses with one line that says
    ``message``: no traceback, no CSV."""
    out = tmp_path / "r.csv"
    done = mpirun(2, *args, "--out", str(out), env=env)
    errors = [line for line in done.stderr.splitlines() if line.startswith("ring.bench:")]
    assert done.returncode != 0 and len(errors) == 1, done.stderr
    assert message in errors[0] and "Traceback" not in done.stderr
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.mpi
@needs_mpi
@pytest.mark.parametrize(
    ("aware", "message"),
    [("0", "need a CUDA-aware MPI library"), ("1", "Python package 'cupy'")],
)
def test_device_buffers_refused_with_one_line(tmp_path, aware, message):
    if aware == "1" and importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed: device buffers would run")
    args = ["--backend", "mpi-allreduce", "--buffers", "device"]
    _refused_with_one_line(tmp_path, args, {"RING_MPI_CUDA_AWARE": aware}, message)


@pytest.mark.slow
@pytest.mark.mpi
@needs_mpi
def test_shared_buffers_in_no_directory_refused_with_one_line(tmp_path):
    args = ["--backend", "mpi,mpi-allreduce", "--buffers", "host,shared"]
    env = {"RING_SHM_DIR": str(tmp_path / "absent")}
    _refused_with_one_line(tmp_path, args, env, "--buffers shared: RING_SHM_DIR=")


def test_unknown_buffers_value_is_refused():
    from ring.bench.backends.mpi_device import check_buffers
    from ring.bench.cli import BenchInputError

    with pytest.raises(BenchInputError, match="expected one of host, device, shared"):
        check_buffers(config_of("--backend", "mpi", "--buffers", "gpu"), "mpi")


def test_the_report_names_series_on_shared_buffers():
    from ring.report.derive.series import label

    rows = [
        {"backend": backend, "sync": "none", "algorithm": algorithm, "buffers": buffers}
        for backend, algorithm in (("mpi", "ring"), ("mpi-allreduce", "mpi-allreduce"))
        for buffers in ("host", "shared")
    ]
    assert [label(r) for r in rows] == [
        "mpi ring (host buffers)",
        "mpi ring (shared buffers)",
        "MPI_Allreduce (host buffers)",
        "MPI_Allreduce (shared buffers)",
    ]
