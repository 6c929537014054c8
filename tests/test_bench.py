"""The harness ``python -m ring.bench``: CLI, result files, validation, data, environment
(its bad input and ``merge``: test_bench_inputs.py).

Runs in-process through ``ring.bench.__main__.main`` on tiny sizes; the ceilings buffer is
shrunk so each run takes a fraction of a second.  No test asserts a timing.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ring.bench.ceilings
from ring import nvtx
from ring.bench import data
from ring.bench.__main__ import main
from ring.bench.backends import (
    CpuBackend,
    CpuSession,
    NumpyDirectBackend,
    NumpyDirectSession,
    register_backend,
    unregister_backend,
)
from ring.bench.cli import BenchInputError, parse_size, sweep_sizes
from ring.bench.environment import collect_environment, parse_cuda_version, parse_gpus
from ring.bench.results import COLUMNS

CONTRACT_COLUMNS = {
    "backend",
    "sync",
    "nodes",
    "dtype",
    "op",
    "bytes",
    "count",
    "iters",
    "time_us",
    "time_us_min",
    "time_us_p25",
    "time_us_p75",
    "time_us_max",
    "algbw_GBps",
    "busbw_GBps",
    "traffic_GBps",
    "wrong",
    "shared_devices",
}
ENVIRONMENT_KEYS = {
    "host",
    "cpu_model",
    "cores",
    "memory_bytes",
    "os",
    "python",
    "packages",
    "gpus",
    "driver",
    "cuda",
    "nvidia_smi_topo",
    "mpi_library",
}
TINY = ["-b", "4", "-e", "4K", "-f", "8", "-n", "3", "-w", "1"]
MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK")


# The same for harness runs in other processes (ring.bench.ceilings.host_array_bytes reads it):
# the tests read no ceiling's value, and 4x a large last-level cache takes seconds per run.
SMALL_CEILINGS_ENV = {"RING_CEILING_BYTES": "1M"}


@pytest.fixture(autouse=True)
def small_ceilings(monkeypatch):
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: 1 << 20)


@pytest.fixture(autouse=True)
def outside_mpirun(monkeypatch):
    for name in MPI_ENV:
        monkeypatch.delenv(name, raising=False)


def read_rows(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames), list(reader)


def bench(tmp_path: Path, *args: str, name: str = "run.csv") -> tuple[int, Path]:
    out = tmp_path / name
    return main([*TINY, *args, "--out", str(out)]), out


# -- sizes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("17", 17),
        ("1K", 1024),
        ("64M", 64 << 20),
        ("1G", 1 << 30),
        ("4kib", 4096),
        ("2MB", 2 << 20),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "1.5K", "-1", "K", "12Q", "1 K B x"])
def test_parse_size_rejects(text):
    with pytest.raises(BenchInputError, match="cannot parse size"):
        parse_size(text)


def test_sweep_sizes_round_down_to_whole_elements():
    assert sweep_sizes(1024, 8192, 2, 4) == (1024, 2048, 4096, 8192)
    # 12 -> 8 bytes, 36 -> 32, 108 is past the end; duplicates after rounding are dropped
    assert sweep_sizes(12, 100, 3, 8) == (8, 32)
    assert sweep_sizes(4, 6, 1.1, 4) == (4,)


# -- the CLI on the CPU-side backends -------------------------------------------------------


def test_cpu_and_numpy_direct_sweep(tmp_path, capsys):
    code, out = bench(
        tmp_path,
        "--backend",
        "cpu,numpy-direct",
        "--sync",
        "pairwise,barrier",
        "--nodes",
        "1,3",
        "-d",
        "float64",
        "-b",
        "8",
    )
    assert code == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # no progress bar when stderr is not a terminal
    columns, rows = read_rows(out)
    assert set(columns) >= CONTRACT_COLUMNS
    assert columns[: len(COLUMNS)] == list(COLUMNS)
    sizes = [8, 64, 512, 4096]
    combos = [("cpu", "pairwise"), ("cpu", "barrier"), ("numpy-direct", "none")]
    expected = [(b, s, n, size) for b, s in combos for n in (1, 3) for size in sizes]
    assert [(r["backend"], r["sync"], int(r["nodes"]), int(r["bytes"])) for r in rows] == expected
    for row in rows:
        nodes, nbytes, t = int(row["nodes"]), int(row["bytes"]), float(row["time_us"]) / 1e6
        assert row["dtype"] == "float64" and row["op"] == "sum"
        assert int(row["count"]) * 8 == nbytes
        assert row["wrong"] == "0"
        assert row["iters"] == "3"
        assert row["shared_devices"] == ""  # host rows: no device to share
        stats = [float(row[k]) for k in ("time_us_min", "time_us_p25", "time_us")]
        stats += [float(row[k]) for k in ("time_us_p75", "time_us_max")]
        assert stats == sorted(stats) and stats[0] > 0
        algbw = float(row["algbw_GBps"])
        assert algbw == pytest.approx(nbytes / t / 1e9, rel=1e-4)
        assert float(row["busbw_GBps"]) == pytest.approx(
            algbw * 2 * (nodes - 1) / nodes, rel=1e-4, abs=1e-12
        )
        # Chunks this small are far below glibc's non-temporal threshold: every all-gather
        # copy reads its destination too (write-allocate), 3 bytes per byte like the adds.
        traffic = 6 * (nodes - 1) * nbytes if row["backend"] == "cpu" else 2 * nodes * nbytes
        if row["backend"] == "numpy-direct" and nodes == 1:
            traffic = 0
        assert float(row["traffic_GBps"]) == pytest.approx(traffic / t / 1e9, rel=1e-4, abs=1e-12)
    table = [line for line in captured.out.splitlines() if not line.startswith("#")]
    assert len(table) == len(rows)
    first = table[0].split()
    # nccl-tests' columns: size count type redop root, out-of-place, in-place.
    assert first[:5] == ["8", "1", "double", "sum", "-1"]
    assert first[8] == "0" and first[12] == "0"
    assert all(float(first[i]) >= 0 for i in (5, 6, 7, 9, 10, 11))
    for column, key in ((5, "oop_time_us"), (9, "time_us")):  # the table is interleaved
        shown = sorted(float(line.split()[column]) for line in table)
        assert shown == pytest.approx(sorted(float(row[key]) for row in rows), abs=0.006)
    assert captured.out.count("# Avg bus bandwidth") == 1
    ceiling_lines = [line for line in captured.out.splitlines() if line.startswith("# Ceilings")]
    assert [line.split()[4] for line in ceiling_lines] == ["start", "end"]
    assert all("add" in line and "triad" in line for line in ceiling_lines)
    # Interleaved: every series at one size before any series at the next.
    sizes = [int(line.split()[0]) for line in table]
    assert sizes == sorted(sizes) and len(set(sizes)) < len(sizes)


def test_json_beside_the_csv(tmp_path):
    code, out = bench(tmp_path, "--backend", "numpy-direct", "--seed", "7")
    assert code == 0
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["schema"] == 2
    assert document["command"][0] == "ring-bench" and "--seed" in document["command"]
    assert document["start_time"].endswith("Z") and document["end_time"] >= document["start_time"]
    assert "git_commit" in document
    environment = document["environment"]
    assert set(environment) >= ENVIRONMENT_KEYS
    assert environment["cores"] >= 1 and environment["memory_bytes"] > 0
    # Whether the calls pushed NVTX ranges (none without a profiler): the run says so.
    assert environment["nvtx_ranges"] is nvtx.AVAILABLE
    assert environment["packages"]["numpy"] == np.__version__
    ceilings = document["ceilings"]
    assert ceilings["copy_GBps"] > 0 and ceilings["add_GBps"] > 0
    host = ceilings["host_memory"]
    assert ceilings["triad_GBps"] > 0 and host["start"]["array_bytes"] == 1 << 20
    for kernel in ("copy", "add", "triad"):  # the better of the two measurements
        both = (host["start"][f"{kernel}_GBps"], host["end"][f"{kernel}_GBps"])
        assert ceilings[f"{kernel}_GBps"] == max(both)
    assert host["drifted"] == (host["drift"] > host["drift_limit"])
    config = document["config"]
    assert config["seed"] == 7 and config["backends"] == ["numpy-direct"]
    assert config["sizes"] == [4, 32, 256, 2048]
    assert document["wrong_total"] == 0
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize(
    ("dtype", "op"),
    [
        ("float16", "sum"),
        ("float", "prod"),
        ("int32", "max"),
        ("uint8", "sum"),
        ("complex64", "prod"),
    ],
)
def test_dtypes_and_ops_validate(tmp_path, dtype, op):
    code, out = bench(
        tmp_path, "--backend", "cpu,numpy-direct", "--nodes", "3", "-d", dtype, "-o", op, "-b", "8"
    )
    assert code == 0
    _, rows = read_rows(out)
    assert rows and all(row["wrong"] == "0" for row in rows)


def test_without_check_wrong_is_null(tmp_path):
    code, out = bench(tmp_path, "-c", "0")
    assert code == 0
    _, rows = read_rows(out)
    assert all(row["wrong"] == "" for row in rows)
    assert json.loads(out.with_suffix(".json").read_text())["wrong_total"] is None


def test_without_out_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*TINY]) == 0
    assert list(tmp_path.iterdir()) == []
    assert "Wrong elements       : 0 OK" in capsys.readouterr().out


def test_console_entry_point_runs_as_module(tmp_path):
    out = tmp_path / "sub" / "m.csv"
    done = subprocess.run(
        [sys.executable, "-m", "ring.bench", *TINY, "-e", "16", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **SMALL_CEILINGS_ENV},  # the autouse fixture stays in this process
    )
    assert done.returncode == 0, done.stderr
    assert out.is_file() and out.with_suffix(".json").is_file()
    command = json.loads(out.with_suffix(".json").read_text())["command"]
    assert command[1:3] == ["-m", "ring.bench"]


# -- validation really fails a wrong result ---------------------------------------------------


class _OffByOneSession(CpuSession):
    """Our ring, then one element of the last node is wrong."""

    def collective(self) -> None:
        super().collective()
        self.buffers[-1][-1] += 1


class _MissingInputSession(NumpyDirectSession):
    """numpy-direct that forgets the last node's input (still writes every buffer)."""

    def collective(self) -> None:
        buffers = self.buffers
        reduced = buffers[0].copy()
        for buffer in buffers[1:-1]:
            self.ufunc(reduced, buffer, out=reduced)
        for buffer in buffers:
            buffer[:] = reduced


@pytest.fixture
def broken_backends():
    @register_backend
    class OffByOne(CpuBackend):
        name = "test-off-by-one"

        def open(self, nodes, sync, config, world):
            return _OffByOneSession(nodes, sync, config, world)

    @register_backend
    class MissingInput(NumpyDirectBackend):
        name = "test-missing-input"

        def open(self, nodes, sync, config, world):
            return _MissingInputSession(nodes, sync, config, world)

    yield
    unregister_backend(OffByOne.name)
    unregister_backend(MissingInput.name)


def test_wrong_element_is_counted_and_fails_the_run(tmp_path, capsys, broken_backends):
    code, out = bench(tmp_path, "--backend", "cpu,test-off-by-one", "--nodes", "2,3")
    assert code == 1
    captured = capsys.readouterr()
    assert "wrong elements" in captured.err and "Traceback" not in captured.err
    assert "FAILED" in captured.out
    _, rows = read_rows(out)  # the files are written before the non-zero exit
    wrong = {(r["backend"], r["nodes"], r["bytes"]): int(r["wrong"]) for r in rows}
    assert all(v == 0 for (backend, _, _), v in wrong.items() if backend == "cpu")
    assert all(v == 1 for (backend, _, _), v in wrong.items() if backend != "cpu")
    # Out of place the same collective is as wrong, and counts in the total alike.
    oop_wrong = {(r["backend"], r["nodes"], r["bytes"]): int(r["oop_wrong"]) for r in rows}
    assert oop_wrong == wrong
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["wrong_total"] == 2 * sum(wrong.values()) > 0


def test_missing_contribution_is_caught_in_every_buffer(tmp_path, broken_backends):
    code, out = bench(tmp_path, "--backend", "test-missing-input", "--nodes", "4", "-d", "float32")
    assert code == 1
    _, rows = read_rows(out)
    for row in rows:
        assert int(row["wrong"]) == 4 * int(row["count"])


def test_interrupted_run_leaves_no_file(tmp_path, capsys):
    class Interrupted(CpuSession):
        calls = 0

        def timed_call(self) -> None:
            Interrupted.calls += 1
            if Interrupted.calls > 4:
                raise KeyboardInterrupt
            super().timed_call()

    @register_backend
    class InterruptedBackend(CpuBackend):
        name = "test-interrupted"

        def open(self, nodes, sync, config, world):
            return Interrupted(nodes, sync, config, world)

    try:
        code, _ = bench(tmp_path, "--backend", "test-interrupted")
    finally:
        unregister_backend(InterruptedBackend.name)
    assert code == 130
    assert "interrupted" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_backend_flags_reach_the_backend(tmp_path):
    seen = []

    @register_backend
    class Flagged(CpuBackend):
        name = "test-flagged"

        @classmethod
        def add_arguments(cls, parser):
            parser.add_argument("--test-chunking", default="auto")

        def check(self, config, world):
            if config.test_chunking not in ("auto", "fine"):
                raise BenchInputError(f"--test-chunking {config.test_chunking!r}: auto or fine")

        def open(self, nodes, sync, config, world):
            seen.append(config.test_chunking)
            return super().open(nodes, sync, config, world)

    try:
        code, out = bench(tmp_path, "--backend", "test-flagged", "--test-chunking", "fine")
        bad = main([*TINY, "--backend", "test-flagged", "--test-chunking", "coarse"])
        other = main([*TINY, "--backend", "numpy-direct", "--test-chunking", "fine"])
    finally:
        unregister_backend(Flagged.name)
    assert (code, bad, other) == (0, 2, 2)  # other: a flag of a backend it does not run
    assert seen == ["fine"]
    config = json.loads(out.with_suffix(".json").read_text())["config"]
    assert config["options"]["test_chunking"] == "fine"
    assert main([*TINY, "--test-chunking", "fine"]) == 2  # gone with its backend


# -- data and validation -----------------------------------------------------------------------


def test_inputs_are_fresh_non_zero_and_reproducible():
    a = data.make_input(0, 3, 1000, np.float32, 0)
    assert np.all(a != 0) and a.dtype == np.float32
    assert np.array_equal(a, data.make_input(0, 3, 1000, np.float32, 0))
    assert not np.array_equal(a, data.make_input(0, 3, 1000, np.float32, 1))
    assert not np.array_equal(a[:999], data.make_input(0, 3, 999, np.float32, 0))
    assert not np.array_equal(a, data.make_input(1, 3, 1000, np.float32, 0))
    for dtype in (np.int8, np.uint64, np.float16, np.complex128):
        assert np.all(data.make_input(3, 2, 500, dtype, 1) != 0)


def test_reference_draws_missing_inputs_again():
    inputs = [data.make_input(5, 4, 333, np.float32, node) for node in range(4)]
    expected = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    assert np.array_equal(data.reference(5, 4, 333, np.float32, "sum"), expected)
    assert np.array_equal(data.reference(5, 4, 333, np.float32, "sum", {2: inputs[2]}), expected)


def test_count_wrong():
    expected = np.array([1.0, 2.0, 3.0, 4.0])
    rtol = data.tolerance(np.float32, 2)
    result = expected.astype(np.float32)
    assert data.count_wrong(result, expected, rtol) == 0
    result[1] = np.nextafter(np.float32(2), np.float32(3))  # one ulp: rounding, not wrong
    assert data.count_wrong(result, expected, rtol) == 0
    result[0], result[2], result[3] = np.nan, np.inf, 4.01
    assert data.count_wrong(result, expected, rtol) == 3
    ints = np.array([250, 7], dtype=np.int64)
    assert data.count_wrong(np.array([-6, 7], dtype=np.int8), ints, 0.0) == 0  # 250 wraps
    assert data.count_wrong(np.array([-5, 7], dtype=np.int8), ints, 0.0) == 1


# -- environment ---------------------------------------------------------------------------------

FAKE_NVIDIA_SMI = """#!/bin/sh
if [ "$1" = "topo" ]; then printf '\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV18\\n'; exit 0; fi
case "$1" in --query-gpu*)
  echo "0, NVIDIA H200, 143771, 00000000:19:00.0, 570.86.15"
  echo "1, NVIDIA H200, 143771, 00000000:3B:00.0, 570.86.15"; exit 0;;
esac
echo "| NVIDIA-SMI 570.86.15   Driver Version: 570.86.15   CUDA Version: 12.8 |"
"""


def test_environment_reads_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    environment = collect_environment()
    assert [gpu["name"] for gpu in environment["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert environment["gpus"][1]["pci_bus_id"] == "00000000:3B:00.0"
    assert environment["gpus"][0]["memory_bytes"] == 143771 << 20
    assert environment["driver"] == "570.86.15"
    assert environment["cuda"] == "12.8"
    assert "NV18" in environment["nvidia_smi_topo"]


def test_environment_without_gpu_is_null():
    assert parse_gpus("") == []
    assert parse_cuda_version("no banner") is None


def test_result_files_are_readable_by_everyone(tmp_path):
    out = tmp_path / "perm.csv"
    old = os.umask(0o022)
    try:
        assert main([*TINY, "--out", str(out)]) == 0
    finally:
        os.umask(old)
    for path in (out, out.with_suffix(".json")):
        assert path.stat().st_mode & 0o777 == 0o644
