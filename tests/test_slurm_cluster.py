"""`snakemake --profile profiles/slurm` against a real SLURM (scripts/slurm.sh): the rules
run as SLURM jobs with the partition, account, memory, time, tasks and CPUs the profile asks
for, their outputs match a local run's, and with one slurmd per emulated host an MPI rule's
ranks span two nodes through `srun --mpi=pmix`. Every daemon, and every job's process, is
gone once the cluster is down (checked in the fixtures' finalizers, after a failed test too);
refusals are one line."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest
from cluster_helpers import (
    SLURM,
    SLURM_STATE,
    hosts,
    hosts_leftovers,
    run_script,
    scontrol_jobs,
    slurm,
    slurm_holders,
    slurm_leftovers,
    unique,
    why_no_hosts,
    why_no_mpi,
    why_no_slurm,
)
from workflow_helpers import copy_workflow, job_env, snakemake

PARTITION = "ring"  # scripts/slurm.sh's one partition
ACCOUNT = "ring-test"
SWEEPS = ["results/cpu/sweep_n2_float32.csv", "results/mpi/sweep_n2_float32.csv"]
# What a run of the harness is, apart from its timings.
SAME = ("backend", "sync", "algorithm", "executor", "buffers", "nodes", "dtype", "op")
SAME += ("bytes", "count", "iters", "wrong")


def test_slurm_refusals_are_one_line():
    assert run_script(SLURM).returncode == 2
    no_sbin = {**os.environ, "PATH": "/usr/bin:/bin"}  # munged, slurmctld, slurmd: in sbin
    done = subprocess.run(
        ["/bin/bash", str(SLURM), "--name", "ringsx", "up"],
        capture_output=True,
        text=True,
        env=no_sbin,
        timeout=60,
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    expected = "needs root" if os.geteuid() != 0 else "apt-get install munge slurmctld slurmd"
    assert expected in lines[0], lines[0]


@pytest.mark.skipif(why_no_slurm() is not None, reason=str(why_no_slurm()))
def test_a_cluster_that_is_not_up_says_so_in_one_line():
    for command in ("status", "env"):
        done = slurm("ringsx", command)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "cluster ringsx is not up" in done.stderr
    assert slurm("ringsx", "down").returncode == 0  # nothing to stop is no error


def _cluster(name: str, *args: str):
    """Bring the cluster up, yield its name, bring it down and check nothing is left."""
    try:
        done = slurm(name, *args, "up")
        assert done.returncode == 0, done.stderr
        again = slurm(name, *args, "up")  # idempotent
        assert again.returncode == 0, again.stderr
        yield name
    finally:
        holders = slurm_holders(name)
        down = slurm(name, "down")
        assert down.returncode == 0, down.stderr
        assert slurm_leftovers(name, holders) == []


@pytest.fixture(scope="module")
def cluster():
    why = why_no_slurm() or why_no_mpi()
    if why:
        pytest.skip(why)
    pytest.importorskip("snakemake_executor_plugin_slurm")
    yield from _cluster(unique("rs"))


@pytest.fixture(scope="module")
def host_cluster():
    """One slurmd on each of two emulated hosts."""
    why = why_no_slurm() or why_no_hosts() or why_no_mpi()
    if why:
        pytest.skip(why)
    pytest.importorskip("snakemake_executor_plugin_slurm")
    name = unique("rh")
    try:
        done = hosts(name, "up", "2", "--rate", "10gbit")
        assert done.returncode == 0, done.stderr
        yield from _cluster(name, "--hosts", name)
    finally:
        assert hosts(name, "down").returncode == 0
        assert hosts_leftovers(name) == []


def submit(cluster: str, workdir: Path, targets, *configs: str):
    """The profile's run of ``targets``, its job states read with squeue (the cluster keeps
    no accounting database for sacct), the first check a second after submitting, each job's
    SLURM log kept; its jobs by rule, as scontrol shows them."""
    env = {k: v for k, v in job_env().items() if not k.startswith("RING_SLURM_")}
    env.update(RING_SLURM_PARTITION=PARTITION, RING_SLURM_ACCOUNT=ACCOUNT)
    env["SLURM_CONF"] = str(SLURM_STATE / cluster / "etc" / "slurm.conf")
    args = [*targets, "--profile", "profiles/slurm", "--slurm-status-command", "squeue"]
    args += ["--slurm-init-seconds-before-status-checks", "1", "--slurm-keep-successful-logs"]
    args += ["--configfile", "config/ci.yaml"]
    done = snakemake(workdir, *args, *configs, env=env, timeout=400)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    jobs = {}
    for job in scontrol_jobs(cluster):
        if job.get("WorkDir") == str(workdir):
            rule = job["Comment"].removeprefix("rule_").split("_wildcards_")[0]
            jobs[rule] = job
    return jobs


def rows(path: Path) -> list[tuple]:
    with open(path, newline="") as handle:
        return sorted(tuple(row[key] for key in SAME) for row in csv.DictReader(handle))


def _asked_of_every_job(job: dict[str, str]) -> None:
    """What profiles/slurm asks for every benchmark job."""
    assert job["JobState"] == "COMPLETED", job
    assert job["Partition"] == PARTITION and job["Account"] == ACCOUNT, job
    assert job["MinMemoryNode"] == "8000M" and job["TimeLimit"] == "02:00:00", job
    assert job["OverSubscribe"] == "NO", job  # --exclusive


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_profile_runs_the_rules_on_a_real_slurm_as_a_local_run_would(cluster, tmp_path):
    workdir = copy_workflow(tmp_path / "slurm")
    jobs = submit(cluster, workdir, SWEEPS)
    assert set(jobs) == {"cpu_run", "mpi_run"}, jobs
    for job in jobs.values():
        _asked_of_every_job(job)
    # cpu_run: one task with a core per node thread; mpi_run: one task per rank, which
    # the rule starts with the profile's launcher, srun.
    assert (jobs["cpu_run"]["NumTasks"], jobs["cpu_run"]["CPUs/Task"]) == ("1", "2")
    assert (jobs["mpi_run"]["NumTasks"], jobs["mpi_run"]["CPUs/Task"]) == ("2", "1")
    slurm_log = Path(jobs["mpi_run"]["StdOut"]).read_text()
    assert "srun -n 2 python -m mpi4py -m ring.bench" in slurm_log, slurm_log

    local = copy_workflow(tmp_path / "local")
    done = snakemake(local, *SWEEPS, "--cores", "2", "--configfile", "config/ci.yaml")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    for sweep in SWEEPS:
        assert rows(workdir / sweep) == rows(local / sweep), sweep
        there = json.loads((workdir / sweep).with_suffix(".json").read_text())
        here = json.loads((local / sweep).with_suffix(".json").read_text())
        assert there["wrong_total"] == here["wrong_total"] == 0
        assert there["config"] == here["config"], sweep
    environment = json.loads((workdir / SWEEPS[1]).with_suffix(".json").read_text())["environment"]
    assert environment["mpi_world_size"] == 2


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_mpi_rule_spans_two_emulated_hosts_through_srun(host_cluster, tmp_path):
    workdir = copy_workflow(tmp_path / "hosts")
    spread = tmp_path / "spread.yaml"
    spread.write_text("mpi:\n  one_rank_per_machine: true\n")
    jobs = submit(host_cluster, workdir, SWEEPS[1:], str(spread))
    job = jobs["mpi_run"]
    _asked_of_every_job(job)
    assert (job["NumNodes"], job["NumTasks"]) == ("2", "2"), job
    assert job["NodeList"] == f"{host_cluster}-h[0-1]", job
    result = json.loads((workdir / SWEEPS[1]).with_suffix(".json").read_text())
    assert result["wrong_total"] == 0
    environment = result["environment"]
    assert (environment["mpi_world_size"], environment["mpi_hosts"]) == (2, 2), environment
