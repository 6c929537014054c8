"""``mpi-allreduce`` in the harness, under ``mpirun --oversubscribe -n 2``.

Every launch has a timeout, so a hang fails the test instead of the CI job.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_bench import SMALL_CEILINGS_ENV

MPIRUN = shutil.which("mpirun")
LAUNCH_TIMEOUT = 120
TINY = ["-b", "4", "-e", "64K", "-f", "16", "-n", "3", "-w", "1"]

pytestmark = [
    pytest.mark.mpi,
    pytest.mark.slow,  # tests/tiers.py: every test runs the harness under mpirun
    pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (apt-get install openmpi-bin)"),
    pytest.mark.skipif(
        importlib.util.find_spec("mpi4py") is None,
        reason="mpi4py not installed (pip install '.[mpi]')",
    ),
]

# A broken backend handed to every rank through RING_BENCH_PLUGINS: rank 1 corrupts two
# elements of its result, so only validation on rank 1 plus the sum over ranks sees them.
BROKEN_PLUGIN = textwrap.dedent(
    """
    from ring.bench.backends import MpiAllreduceBackend, MpiAllreduceSession, register_backend


    class Session(MpiAllreduceSession):
        def collective(self):
            super().collective()
            if self.world.rank == 1:
                self.buffers[0][:2] += 1

        def collective_out_of_place(self):  # MPI's own out of place, as wrong
            super().collective_out_of_place()
            if self.world.rank == 1:
                self.buffers[0][:2] += 1


    @register_backend
    class Broken(MpiAllreduceBackend):
        name = "test-mpi-broken"

        def open(self, nodes, sync, config, world):
            return Session(nodes, sync, config, world)
    """
)


def mpirun(nodes: int, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    version = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True, timeout=30)
    command = [MPIRUN]
    if "Open MPI" in version.stdout + version.stderr:
        command.append("--oversubscribe")  # more ranks than this machine may have cores
    command += ["-n", str(nodes), sys.executable, "-m", "ring.bench", *args]
    full_env = {**os.environ, **SMALL_CEILINGS_ENV, **(env or {})}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        full_env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(
        command, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, env=full_env
    )


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def test_mpi_allreduce_two_ranks(tmp_path):
    out = tmp_path / "mpi.csv"
    done = mpirun(
        2, "--backend", "mpi-allreduce", *TINY, "-d", "float64", "-b", "8", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    rows = read_rows(out)
    assert [int(row["bytes"]) for row in rows] == [8, 128, 2048, 32768]
    for row in rows:
        assert (row["backend"], row["sync"], row["nodes"]) == ("mpi-allreduce", "none", "2")
        assert row["wrong"] == "0"
        assert row["traffic_GBps"] == ""  # MPI's own algorithm: unknown, not invented
        assert row["shared_devices"] == ""  # host rows: no device to share
        assert float(row["time_us_min"]) <= float(row["time_us"]) <= float(row["time_us_max"])
    # Both ranks on this machine: the JSON says so (the report's "one host" label).
    assert json.loads(out.with_suffix(".json").read_text())["environment"]["mpi_hosts"] == 1
    # Only rank 0 prints: one table line per size.
    table = [line for line in done.stdout.splitlines() if line and not line.startswith("#")]
    assert len(table) == len(rows)
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["config"]["mpi_world_size"] == 2
    assert document["environment"]["mpi_library"]
    assert document["ceilings"]["add_GBps"] > 0
    # The command as typed: the launcher and its flags, then the harness's own argv.
    launched = document["launch_command"]
    assert Path(launched[0]).name in ("mpirun", "mpiexec") and "-n" in launched
    assert launched[launched.index("-n") + 1] == "2" and "ring.bench" in launched
    assert document["environment"]["mpi_library"].split()[-1][0].isdigit()


def test_wrong_elements_are_summed_over_ranks(tmp_path):
    env = _plugin_env(tmp_path, "broken_mpi_backend", BROKEN_PLUGIN)
    out = tmp_path / "broken.csv"
    done = mpirun(2, "--backend", "test-mpi-broken", *TINY, "--out", str(out), env=env)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    rows = read_rows(out)  # rank 0 wrote the files before the failing exit
    wrong = [int(row["wrong"]) for row in rows]
    assert wrong == [min(2, int(row["count"])) for row in rows] and wrong[-1] == 2
    # Out of place the same collective is as wrong, and counts in the total alike.
    assert [int(row["oop_wrong"]) for row in rows] == wrong
    assert json.loads(out.with_suffix(".json").read_text())["wrong_total"] == 2 * sum(wrong)


def test_nodes_must_match_the_world(tmp_path):
    out = tmp_path / "r.csv"
    done = mpirun(2, "--backend", "mpi-allreduce", "--nodes", "4", *TINY, "--out", str(out))
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("ring.bench:")]
    assert len(errors) == 1 and "does not match the 2 ranks" in errors[0]  # rank 0 alone says it
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_timeout_aborts_every_rank(tmp_path):
    out = tmp_path / "slow.csv"
    # A run that would take minutes: the watchdog ends the whole job after 2 s.
    done = mpirun(
        2,
        "--backend",
        "mpi-allreduce",
        "-b",
        "64M",
        "-e",
        "64M",
        "-n",
        "100000",
        "--timeout",
        "2",
        "--out",
        str(out),
    )
    assert done.returncode != 0
    assert "ring.bench: --timeout 2.0 s reached" in done.stderr
    assert not out.exists() and not out.with_suffix(".json").exists()


# Rank 0 alone raises in the middle of the sweep: the rank-0-only failure that used to leave
# rank 1 waiting in its next collective until killed.
RANK0_DIES_PLUGIN = textwrap.dedent(
    """
    from ring.bench.backends import MpiAllreduceBackend, MpiAllreduceSession, register_backend


    class Session(MpiAllreduceSession):
        calls = 0

        def collective(self):
            Session.calls += 1
            if self.world.rank == 0 and Session.calls == 5:
                raise OSError(28, "No space left on device (injected on rank 0)")
            super().collective()


    @register_backend
    class Dies(MpiAllreduceBackend):
        name = "test-mpi-rank0-dies"

        def open(self, nodes, sync, config, world):
            return Session(nodes, sync, config, world)
    """
)


def _plugin_env(tmp_path, module: str, source: str) -> dict:
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir(exist_ok=True)
    (plugin_dir / f"{module}.py").write_text(source)
    return {
        "RING_BENCH_PLUGINS": module,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(plugin_dir), os.environ.get("PYTHONPATH")])
        ),
    }


def test_an_exception_on_rank_0_alone_ends_the_job(tmp_path):
    env = _plugin_env(tmp_path, "rank0_dies_backend", RANK0_DIES_PLUGIN)
    out = tmp_path / "r.csv"
    # No --timeout: the harness itself must end the job (mpirun's timeout fails the test).
    done = mpirun(2, "--backend", "test-mpi-rank0-dies", *TINY, "--out", str(out), env=env)
    assert done.returncode != 0
    assert "injected on rank 0" in done.stderr
    assert not out.exists()


@pytest.mark.parametrize("where", ["proc", "directory"])
def test_unwritable_out_fails_on_every_rank_before_any_work(tmp_path, where):
    out = "/proc/ring-bench/r.csv" if where == "proc" else str(tmp_path / "d.csv")
    if where == "directory":
        Path(out).mkdir()
    done = mpirun(2, "--backend", "mpi", "-b", "1K", "-e", "4K", "-n", "2", "--out", out)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("ring.bench:")]
    assert len(errors) == 1 and ("cannot write" in errors[0] or "directory" in errors[0])
    assert done.stdout == ""  # nothing was measured


def test_mpi_allreduce_refuses_a_dtype_the_library_cannot_reduce(tmp_path):
    done = mpirun(2, "--backend", "mpi-allreduce", *TINY, "-d", "float16")
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("ring.bench:")]
    assert len(errors) == 1 and "cannot reduce float16" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_auto_over_mpi_plans_and_records_what_it_ran(tmp_path):
    """``--algorithm auto`` on the mpi backend plans by measuring, the ranks together: the
    JSON counts the planning calls, and each row names the plan the ranks settled on."""
    out = tmp_path / "auto.csv"
    # Above ring.mpi.agree.RIDING_BYTES: at or below it auto picks a riding call by rule.
    sweep = ["-b", "128K", "-e", "2M", "-f", "16", "-n", "20", "-w", "1", "-d", "float64"]
    env = {"RING_WISDOM": str(tmp_path / "wisdom.json")}
    done = mpirun(2, "--backend", "mpi", "--algorithm", "auto", *sweep, "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    rows = read_rows(out)
    assert [int(row["bytes"]) for row in rows] == [131072, 2097152]
    assert all(row["wrong"] == "0" for row in rows)
    planning = json.loads(out.with_suffix(".json").read_text())["planning"]
    assert planning["calls"] > 0 and planning["wisdom"] == env["RING_WISDOM"]
    plans = json.loads((tmp_path / "wisdom.json").read_text())["plans"]
    assert len(plans) == len(rows)
    chosen = {key.split("|")[5]: plan["choice"][0] for key, plan in plans.items()}
    for row in rows:
        log2 = (int(row["bytes"]) - 1).bit_length()
        assert row["resolved"] == chosen[str(log2)]
