"""The MPI backend under ``mpirun``: correctness, bad input on every rank, dying ranks.

Each test launches one small program from ``tests/mpi_programs/`` that batches many cases,
so the whole file stays within a minute or two on two cores.  Every launch has a timeout: a
bug that hangs the ring fails the test instead of the CI job.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import pytest
from test_bench import SMALL_CEILINGS_ENV

from ring.mpi.shared import _alive, shared_directory

PROGRAMS = Path(__file__).parent / "mpi_programs"
MPIRUN = shutil.which("mpirun")
LAUNCH_TIMEOUT = 120

pytestmark = [
    pytest.mark.mpi,
    # tests/tiers.py: every test runs under mpirun (test_mpi_algorithms and test_mpi_shared
    # import these marks).
    pytest.mark.slow,
    pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (apt-get install openmpi-bin)"),
    pytest.mark.skipif(
        importlib.util.find_spec("mpi4py") is None,
        reason="mpi4py not installed (pip install '.[mpi]')",
    ),
]


@cache
def _is_open_mpi() -> bool:
    out = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True, timeout=30)
    return "Open MPI" in out.stdout + out.stderr


def mpirun(
    nodes: int, program: str, *args: str, timeout: float = LAUNCH_TIMEOUT, env: dict | None = None
):
    """Run ``program`` (a file in mpi_programs/, or ``-m module``) on ``nodes`` ranks, with
    ``env`` added to this environment; returns (returncode, stdout, stderr, seconds)."""
    command = [MPIRUN]
    if _is_open_mpi():
        # Tests start more ranks than this machine may have cores.
        command.append("--oversubscribe")
    target = [program] if program == "-m" else [str(PROGRAMS / program)]
    command += ["-n", str(nodes), sys.executable, *target, *args]
    env = {**os.environ, **SMALL_CEILINGS_ENV, **(env or {})}  # ceilings: for ring.bench
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    start = time.monotonic()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # mpirun forwards SIGTERM to its ranks; the group kill catches what is left.
        process.terminate()
        try:
            out, err = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
        pytest.fail(f"mpirun -n {nodes} {program} {' '.join(args)} hung for {timeout} s:\n{err}")
    return process.returncode, out, err, time.monotonic() - start


def json_lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_collectives_match_reference(nodes):
    """Every op and dtype, lengths 0, 1, < N, N, primes; also segmented chunks and the API."""
    code, out, err, _ = mpirun(nodes, "collectives.py")
    (result,) = json_lines(out)
    assert result["nodes"] == nodes
    reports = result["reports"]
    assert [r["rank"] for r in reports] == list(range(nodes)), err
    for report in reports:
        assert report["cases"] > 2000
        assert report["failures"] == [], "\n".join(report["failures"])
    assert code == 0, err


def test_device_buffers_on_a_fake_cupy():
    """The CuPy path (device context, scratch on the device, CuPy ufuncs, a stream
    synchronisation before MPI touches a chunk) on host memory behind a fake CuPy whose
    kernels only run at synchronize()."""
    code, out, err, _ = mpirun(3, "fake_device.py")
    (result,) = json_lines(out)
    for report in result["reports"]:
        assert report["cases"] == 64
        assert report["failures"] == [], "\n".join(report["failures"])
    assert code == 0, err


EXPECTED = {
    "lengths": ("ValueError", "buffer lengths differ between ranks"),
    "dtypes": ("TypeError", "buffer dtypes differ between ranks"),
    "ops": ("ValueError", "ops differ between ranks"),
    "collectives": ("ValueError", "every rank must call the same collective"),
    "one_rank_not_contiguous": ("ValueError", "bad input on rank 1: buffers[0] is not contiguous"),
    "one_rank_two_buffers": ("ValueError", "bad input on rank 1: the MPI backend takes one"),
    "unknown_op": ("ValueError", "bad input on every rank: unknown op 'mean'"),
    "complex_max": ("TypeError", "op 'max' is not defined for complex"),
    "bare_array": ("TypeError", "pass this rank's buffer in a list: [buf]"),
    "device_not_cuda_aware": ("RuntimeError", "need a CUDA-aware MPI library"),
    "device_without_cupy": ("MissingDependencyError", "needs the Python package 'cupy'"),
    "unpicklable_error": ("RuntimeError", "bad input on rank 1: raised on rank 1 only"),
    "op_none_everywhere": ("ValueError", "bad input on every rank: unknown op None"),
    "op_none_on_one_rank": ("ValueError", "bad input on rank 1: unknown op None"),
    "segment_negative_on_one_rank_api": ("ValueError", "bad input on rank 1: segment_bytes"),
    "segment_differs_api": ("ValueError", "segment_bytes differs between ranks"),
    "segment_negative_on_one_rank_ctor": ("ValueError", "bad segment_bytes on rank 1"),
    "segment_differs_ctor": ("ValueError", "segment_bytes differs between ranks"),
}


@pytest.fixture(scope="module")
def bad_input_report():
    code, out, err, _ = mpirun(3, "bad_input.py")
    assert code == 0, err
    (report,) = json_lines(out)
    assert report["nodes"] == 3
    return report


def assert_same_error_on_every_rank(seen: list, nodes: int, kind: str, text: str) -> None:
    """Each of ``nodes`` ranks raised the same ``kind`` with the same message (containing
    ``text``), and no rank's buffer was touched."""
    assert len(seen) == nodes
    for type_name, message, untouched in seen:
        assert (type_name, message) == tuple(seen[0][:2])
        assert type_name == kind, message
        assert text in message
        assert untouched


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_bad_input_same_error_on_every_rank(bad_input_report, scenario):
    """Each rank raises the same exception with the same message; no buffer was touched."""
    assert_same_error_on_every_rank(bad_input_report["scenarios"][scenario], 3, *EXPECTED[scenario])


def test_ring_still_works_after_bad_input_then_refuses_once_closed(bad_input_report):
    assert bad_input_report["after"]
    for type_name, message, untouched in bad_input_report["scenarios"]["closed"]:
        assert type_name == "CommunicatorClosedError" and "closed" in message and untouched


def test_mismatched_lengths_name_every_rank(bad_input_report):
    (_, message, _), *_ = bad_input_report["scenarios"]["lengths"]
    assert "rank 0: 11 elements, rank 1: 11 elements, rank 2: 12 elements" in message


@pytest.mark.parametrize(
    "mode", ["exit", "raise", "raise-bound", "raise-shared", "interrupt", "interrupt-shared"]
)
def test_rank_failing_mid_collective_ends_the_job(mode):
    code, out, err, _ = mpirun(3, "rank_dies.py", mode, timeout=60)
    assert code != 0
    assert "finished" not in out
    if mode == "interrupt-shared":
        assert "rank 1 failed during shared_buffer between the ranks' exchanges" in err
    elif mode != "exit":
        assert "rank 1 failed during allreduce after data started moving" in err
    if mode.startswith("raise"):
        assert "injected failure in rank 1's reduction" in err
    if mode.startswith("interrupt"):
        assert "KeyboardInterrupt" in err


def test_parts_left_by_killed_ranks_are_removed_by_the_next_allocation():
    """A rank killed mid-allocation (SIGKILL, then the job aborted under the others) leaves
    every rank's part in /dev/shm, memory no process holds; the next allocation on the
    host removes the parts of processes that no longer run."""
    directory = shared_directory()
    code, out, _, _ = mpirun(3, "shared_leftovers.py", "die", timeout=60)
    assert code != 0 and "allocated" not in out
    pids = re.findall(r"rank \d pid (\d+)", out)
    assert len(pids) == 3
    made_by = re.compile(r"ring-mpi-(\d+)-")
    left = [n for n in os.listdir(directory) if (m := made_by.match(n)) and m[1] in pids]
    assert left, "the killed job left no part behind: the scenario did not happen"
    deadline = time.monotonic() + 30  # mpirun may return while its ranks are still ending
    while any(_alive(int(p)) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    code, out, err, _ = mpirun(2, "shared_leftovers.py", "allocate", timeout=60)
    assert code == 0, err
    assert "allocated" in out
    assert not set(left) & set(os.listdir(directory))


def test_watchdog_aborts_a_hung_job():
    code, out, err, _ = mpirun(2, "rank_dies.py", "hang", "2", timeout=60)
    assert code != 0
    assert "finished" not in out
    # Whichever rank's timer fires first aborts the job, possibly before the others print.
    assert re.search(r"rank_dies.py: watchdog: rank \d still running after 2 s; aborting", err)


def test_bench_under_mpirun_writes_a_valid_csv(tmp_path):
    """``--backend mpi,mpi-allreduce`` on 3 ranks, sizes that do not divide by 3."""
    out = tmp_path / "mpi.csv"
    args = ["-b", "4", "-e", "4K", "-f", "7", "-n", "3", "-w", "1", "--out", str(out)]
    code, _, err, _ = mpirun(3, "-m", "ring.bench", "--backend", "mpi,mpi-allreduce", *args)
    assert code == 0, err
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    sizes = [4, 28, 196, 1372]
    assert [(r["backend"], int(r["bytes"])) for r in rows] == [
        (backend, size) for backend in ("mpi", "mpi-allreduce") for size in sizes
    ]
    for row in rows:
        assert (row["sync"], row["nodes"], row["dtype"], row["op"]) == (
            "none",
            "3",
            "float32",
            "sum",
        )
        assert int(row["count"]) == int(row["bytes"]) // 4 and row["iters"] == "3"
        assert row["wrong"] == "0" and row["shared_devices"] == ""
        times = [float(row[k]) for k in ("time_us_min", "time_us_p25", "time_us", "time_us_p75")]
        assert 0 < times[0] <= times[1] <= times[2] <= times[3] <= float(row["time_us_max"])
        assert float(row["busbw_GBps"]) == pytest.approx(float(row["algbw_GBps"]) * 4 / 3, 1e-3)
    ring_rows = [r for r in rows if r["backend"] == "mpi"]
    for row in ring_rows:
        traffic = 7 * 2 * int(row["bytes"]) / (float(row["time_us"]) * 1e-6) / 1e9
        assert float(row["traffic_GBps"]) == pytest.approx(traffic, rel=1e-3)
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["schema"] == 2 and "mpi" in meta["config"]["backends"]
    assert meta["environment"]["mpi_library"]


def test_bench_registers_the_mpi_backend():
    from ring.bench.backends import available_backends

    backend = available_backends()["mpi"]
    assert backend.needs_mpirun and backend.traffic_bytes(backend(), 100, 4) == 2100


# -- one rank, or none ----------------------------------------------------------------


def test_single_rank_api_cache_and_options():
    code, out, err, _ = mpirun(1, "single_rank.py")
    assert code == 0 and "single_rank ok" in out, err


def test_watchdog_ends_a_process_without_mpi():
    code = "import time; from ring.bench.watchdog import Watchdog; "
    code += "Watchdog(0.2, message='t').start(); "
    code += "time.sleep(30)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 124
    assert re.search(
        r"^t: process \d+ still running after 0.2 s; aborting this process", done.stderr
    )
    assert "mpi4py" not in done.stderr


def test_watchdog_rejects_bad_timeouts():
    from ring.bench.watchdog import Watchdog

    for bad in (-1, float("nan"), True):
        with pytest.raises(ValueError, match="timeout"):
            Watchdog(bad)
    assert Watchdog(0).seconds is None
    assert Watchdog(None).start()._timer is None


@pytest.mark.parametrize("nodes", [2, 3])
def test_auto_plans_the_same_on_every_rank(tmp_path, nodes):
    """Ranks whose local timings disagree (rank 0 slow on ring, rank 1 on direct) plan alike
    by the slowest rank's time; a second ring starts tuned from rank 0's wisdom whatever
    rank 1's says; a call that differs mid-planning raises the same error on every rank;
    on one buffer the candidates' timed calls run bound."""
    code, out, err, _ = mpirun(nodes, "planning.py", str(tmp_path))
    assert code == 0, err
    (report,) = json_lines(out)
    assert report["plans"] == [["recursive-doubling"]] * nodes
    assert len(set(report["calls"])) == 1 and report["calls"][0] > 0
    assert report["tuned"] == {"plans": [["recursive-doubling"]] * nodes, "calls": [0] * nodes}
    for kind, message, untouched in report["differ"]:
        assert kind == "ValueError" and "buffer lengths differ between ranks" in message
        assert untouched
    assert report["estimate"] == {"plans": [[]] * nodes, "calls": [0] * nodes}
    assert report["short budget"] == [["recursive-doubling"]] * nodes  # by its first call
    assert report["cut"]["plans"] == [["recursive-doubling"]] * nodes
    assert len(set(report["cut"]["shared"])) == 1 and report["cut"]["shared"][0] > 0
    assert report["correct"] == [True] * nodes
    # On one buffer, each of the 3 candidates' programs is made once (its first call binds
    # it, its timed calls run bound), and once more the plan's own.
    assert report["programs"] == [4] * nodes
    # Only rank 0 writes wisdom, and it holds the agreed plan.
    document = json.loads((tmp_path / "wisdom-0.json").read_text())
    assert {p["choice"][0] for p in document["plans"].values()} == {"recursive-doubling"}
    assert not (tmp_path / "wisdom-1.json").exists()


def test_the_planning_cost_script_runs_under_mpirun():
    """scripts/plan_cost.py --backend mpi: rank 0 prints one line, of the job's N."""
    script = Path(__file__).parents[1] / "scripts" / "plan_cost.py"
    code, out, err, _ = mpirun(
        2, str(script), "--backend", "mpi", "--bytes", "65536", "--shapes", "2"
    )
    assert code == 0, err
    (line,) = out.splitlines()
    assert re.fullmatch(r"N=2 65536 B: planning [\d.]+ ms \(.*\) in [\d.]+ calls; .* of them", line)


@pytest.mark.parametrize("nodes", [2, 3])
def test_call_forms_over_mpi(nodes):
    """Op spellings, bitwise ops and bool, an n-D buffer, out of place and async_op on the
    mpi backend; a bad
    ``send`` on rank 1 alone: every rank raises its message, every recv untouched."""
    code, out, err, _ = mpirun(nodes, "forms.py")
    assert code == 0, err
    (report,) = json_lines(out)
    assert report["right"] == [True] * nodes
    for kind, message, untouched in report["refused"]:
        assert kind == "ValueError" and "bad input on rank 1: send[0]" in message
        assert untouched
    assert report["threads"]  # Open MPI under mpi4py: MPI_THREAD_MULTIPLE, async checked
