"""scripts/hosts.sh: two emulated hosts are two nodes to Open MPI (its map, SHARED groups,
/dev/shm), an allreduce across them runs over TCP at the links' rate, and a host's link
taken down or its processes killed end the job in one line, with no result, and a rerun
completes. Everything the set made is gone after the tests (checked in the fixture's
finalizer, which runs after a failed test too). Refusals are one line."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cluster_helpers import (
    HOSTS,
    ROOT,
    hosts,
    hosts_leftovers,
    run_env,
    run_script,
    unique,
    why_no_hosts,
    why_no_mpi,
)

SPLIT = ROOT / "tests" / "mpi_programs" / "hosts_split.py"
# A hang is what these fail on, not a slow run: far above the seconds a fault takes to end.
HANG_S = 120


def _one_line(done) -> str:
    lines = done.stderr.splitlines()
    assert done.returncode != 0 and len(lines) == 1, (done.returncode, done.stderr)
    assert lines[0].startswith("hosts.sh: "), lines[0]
    return lines[0]


# -- refusals: quick, no namespaces made ------------------------------------------------------


def test_usage_and_bad_arguments_are_one_line(tmp_path):
    assert run_script(HOSTS).returncode == 2
    assert "got 0" in _one_line(run_script(HOSTS, "up", "0"))
    assert "--rate fast" in _one_line(run_script(HOSTS, "--rate", "fast", "up", "2"))
    assert "--name" in _one_line(run_script(HOSTS, "--name", "Bad_Name", "up", "2"))


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to drop it"
)
def test_a_user_without_root_is_refused_in_one_line():
    # A copy nobody can read: the checkout may sit in a folder only root can enter.
    folder = Path(tempfile.mkdtemp(prefix="ring-hosts-"))
    try:
        folder.chmod(0o755)
        script = Path(shutil.copy(HOSTS, folder))
        script.chmod(0o644)
        done = subprocess.run(
            [*NOBODY, "bash", str(script), "--name", "ringhx", "up", "2"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(folder)
    assert "needs root" in _one_line(done)


@pytest.mark.skipif(os.geteuid() != 0, reason="the namespace check comes after the root check")
def test_no_namespaces_is_refused_in_one_line(tmp_path):
    # An unshare that fails as it does in a container that forbids namespaces.
    stub = tmp_path / "unshare"
    stub.write_text(
        "#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n"
    )
    stub.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    line = _one_line(hosts("ringhx", "up", "2", env=env))
    assert "cannot create network, UTS, IPC and mount namespaces" in line
    assert "Operation not permitted" in line
    assert hosts_leftovers("ringhx") == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_commands_on_a_set_that_is_not_up_say_so_in_one_line():
    for args in (["status"], ["mpirun", "-n", "2", "true"], ["link", "ringhx-h1", "down"]):
        assert "no hosts named ringhx are up" in _one_line(hosts("ringhx", *args)), args
    # down is idempotent: nothing to remove is no error.
    assert hosts("ringhx", "down").returncode == 0


# -- two hosts --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_hosts():
    why = why_no_hosts() or why_no_mpi()
    if why:
        pytest.skip(why)
    name = unique("rt")
    try:
        done = hosts(name, "up", "2", "--rate", "1gbit")
        assert done.returncode == 0, done.stderr
        # Idempotent: the same again changes nothing and succeeds.
        again = hosts(name, "up", "2", "--rate", "1gbit")
        assert again.returncode == 0 and again.stdout == done.stdout, again.stderr
        yield name
    finally:
        down = hosts(name, "down")
        assert down.returncode == 0, down.stderr
        assert hosts_leftovers(name) == []


def mpirun(name: str, *args: str, timeout: float = HANG_S):
    command = ["bash", str(HOSTS), "--name", name, "mpirun", *args]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, env=run_env(), cwd=ROOT
    )


def bench(name: str, out: Path, *sweep: str) -> list[str]:
    """`hosts.sh mpirun`: one rank per host running the harness."""
    harness = [sys.executable, "-m", "mpi4py", "-m", "ring.bench", "--nodes", "2"]
    return ["--map-by", "node", "-n", "2", *harness, *sweep, "--out", str(out)]


@pytest.mark.slow
def test_the_hosts_are_distinct_nodes_to_open_mpi(two_hosts):
    tag = f"{two_hosts}-split"
    done = mpirun(two_hosts, "--display-map", "-n", "4", sys.executable, str(SPLIT), tag)
    assert done.returncode == 0, done.stderr
    nodes = {line.split()[3] for line in done.stdout.splitlines() if "Data for node:" in line}
    assert nodes == {f"{two_hosts}-h0", f"{two_hosts}-h1"}, done.stdout
    ranks = {}
    for line in done.stdout.splitlines():
        words = line.split()
        if len(words) == 4 and words[0].isdigit():
            ranks[int(words[0])] = (words[1], int(words[2]), words[3])
    assert sorted(ranks) == [0, 1, 2, 3], done.stdout
    by_host: dict[str, set[int]] = {}
    for rank, (host, _, _) in ranks.items():
        by_host.setdefault(host, set()).add(rank)
    assert set(by_host) == nodes and all(len(r) == 2 for r in by_host.values()), ranks
    for host, shared_size, seen in ranks.values():
        # MPI_Comm_split_type(SHARED) groups the ranks of one host; /dev/shm is the host's.
        assert shared_size == 2, ranks
        assert set(map(int, seen.split(","))) == by_host[host], ranks


def _best_GBps(path: Path) -> dict[str, float]:
    """Per backend: bytes over the fastest call (N = 2: busbw = algbw), and no wrong element."""
    best = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            assert row["wrong"] == "0", row
            rate = int(row["bytes"]) / (float(row["time_us_min"]) * 1e3)
            best[row["backend"]] = max(rate, best.get(row["backend"], 0.0))
    return best


@pytest.mark.slow
def test_an_allreduce_across_the_hosts_runs_at_the_links_rate(two_hosts, tmp_path):
    """Our ring and MPI_Allreduce at N = 2, one rank per host, at 100 Mbit/s and 1 Gbit/s:
    both rates far below what TCP between the hosts moves on this machine, so the links set
    the pace. Each direction of the ring moves S per call at N = 2, so the fastest call's
    bus bandwidth cannot pass the rate; the faster link is clearly faster."""
    best = {}
    for rate, gbit in (("100mbit", 0.1), ("1gbit", 1.0)):
        assert hosts(two_hosts, "rate", rate).returncode == 0
        out = tmp_path / f"{rate}.csv"
        sweep = ["--backend", "mpi,mpi-allreduce", "-b", "2M", "-e", "2M", "-n", "3", "-w", "1"]
        done = mpirun(two_hosts, *bench(two_hosts, out, *sweep))
        assert done.returncode == 0, done.stderr
        environment = json.loads(out.with_suffix(".json").read_text())["environment"]
        assert environment["mpi_hosts"] == 2 and environment["mpi_world_size"] == 2
        best[rate] = _best_GBps(out)
        for backend, measured in best[rate].items():
            assert measured <= 1.5 * gbit / 8, (rate, backend, measured)
    for backend in ("mpi", "mpi-allreduce"):
        assert best["1gbit"][backend] >= 3 * best["100mbit"][backend], best
    assert hosts(two_hosts, "rate", "1gbit").returncode == 0


def _running_on(host: str, what: str) -> bool:
    pids = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout
    for pid in pids.split():
        try:
            if what in Path(f"/proc/{pid}/cmdline").read_text():
                return True
        except OSError:
            continue
    return False


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["link", "kill"])
def test_a_host_lost_mid_sweep_ends_the_job_in_one_line_and_a_rerun_completes(
    two_hosts, tmp_path, fault
):
    lost = f"{two_hosts}-h1"
    out = tmp_path / "lost.csv"
    endless = ["--backend", "mpi", "-b", "1M", "-e", "1M", "-n", "1000000", "-w", "1"]
    command = ["bash", str(HOSTS), "--name", two_hosts, "mpirun"]
    command += bench(two_hosts, out, *endless)
    run = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=run_env(),
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while not _running_on(lost, "ring.bench") and time.monotonic() < deadline:
            assert run.poll() is None, run.stderr.read() if run.stderr else ""
            time.sleep(0.2)
        time.sleep(2)  # into the sweep
        faulted = hosts(two_hosts, *(["link", lost, "down"] if fault == "link" else ["kill", lost]))
        assert faulted.returncode == 0, faulted.stderr
        try:
            _, stderr = run.communicate(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job still runs {HANG_S} s after the {fault} fault")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
        hosts(two_hosts, "link", lost, "up")
    lines = stderr.splitlines()
    assert run.returncode != 0 and len(lines) == 1, stderr
    assert lines[0].startswith("hosts.sh: the MPI job failed: "), lines[0]
    assert lost in lines[0], lines[0]
    assert ("link is down" if fault == "link" else "were killed") in lines[0], lines[0]
    # No result of the lost run, whole or partial.
    assert not any(tmp_path.iterdir()), sorted(tmp_path.iterdir())
    rerun = mpirun(two_hosts, *bench(two_hosts, out, "--backend", "mpi", "-b", "1K", "-e", "64K"))
    assert rerun.returncode == 0, rerun.stderr
    assert _best_GBps(out)
