"""`snakemake --profile profiles/slurm` plans every job with the SLURM profile's resources,
although Snakemake also applies the workflow profile profiles/default; unset variables stop
the plan with one message; MPI sweeps ask SLURM for what its plugin accepts."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from workflow_helpers import job_env, parse_plan, pinned_config, snakemake, tool

# Slow (tests/tiers.py): Snakemake dry runs of the workflow.
pytestmark = pytest.mark.slow

SLURM_ENV = {"RING_SLURM_PARTITION": "test-partition", "RING_SLURM_ACCOUNT": "test-account"}
# The plan fixtures workdir and stubs (a copy of the workflow, stub mpirun and nsys): conftest.py.
TIMED = {"cpu_run", "mpi_run", "gpu_run", "kernel_bw_sweep", "nsys_profile_cpu"}
TIMED |= {"cpu_confirm", "mpi_confirm"}


def slurm_plan(workdir, env, target, *args):
    environ = {k: v for k, v in job_env().items() if not k.startswith("RING_SLURM_")}
    environ.update(env)
    return snakemake(
        workdir,
        "--profile",
        "profiles/slurm",
        "-n",
        "--configfile",
        "config/ci.yaml",
        *args,
        env=environ,
    )


def test_every_job_gets_the_slurm_profile_resources(workdir, stubs, tmp_path):
    assert (workdir / "profiles" / "default" / "config.yaml").exists()
    done = slurm_plan(
        workdir,
        SLURM_ENV,
        "all",
        "--configfile",
        pinned_config(tmp_path, stubs),
        "--config",
        "gpus=4",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = [job for job in parse_plan(done.stdout + done.stderr) if job.resources]
    assert {job.rule for job in jobs} >= TIMED
    for job in jobs:
        assert job.resources["slurm_partition"] == "test-partition", job
        assert job.resources["slurm_account"] == "test-account", job
        assert job.resources["mem_mb"] == "8000", job
        assert job.resources["runtime"] == "120", job
        if job.rule in TIMED:
            assert job.resources["slurm_extra"] == "--exclusive", job
    mpi = [job for job in jobs if job.rule in ("mpi_run", "mpi_confirm")]
    assert len({job.rule for job in mpi}) == 2
    assert all(job.resources["mpi"] == "srun" for job in mpi)
    assert all(job.resources["tasks"] == job.wildcards["nodes"] for job in mpi)
    assert all("nodes" not in job.resources for job in mpi)


def test_one_rank_per_machine_asks_for_as_many_machines_as_ranks(workdir, stubs, tmp_path):
    spread = tmp_path / "spread.yaml"
    spread.write_text("mpi:\n  one_rank_per_machine: true\n")
    done = slurm_plan(
        workdir, SLURM_ENV, "mpi", "--configfile", pinned_config(tmp_path, stubs), str(spread)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    mpi = [job for job in parse_plan(done.stdout + done.stderr) if job.rule == "mpi_run"]
    assert mpi
    for job in mpi:
        assert job.resources["nodes"] == job.resources["tasks"] == job.wildcards["nodes"]


@pytest.mark.parametrize("unset", ["RING_SLURM_PARTITION", "RING_SLURM_ACCOUNT", "both"])
def test_unset_variables_stop_the_plan_with_one_message(workdir, unset):
    env = {} if unset == "both" else {k: v for k, v in SLURM_ENV.items() if k != unset}
    done = slurm_plan(workdir, env, "cpu")
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert output.count("set RING_SLURM_PARTITION and RING_SLURM_ACCOUNT") == 1, output
    assert "$RING_SLURM" not in output


def test_a_single_rank_mpi_sweep_is_refused_by_the_schema(workdir, tmp_path):
    single = tmp_path / "single.yaml"
    single.write_text("mpi:\n  nodes: [1, 2]\n")
    done = snakemake(workdir, "-n", "cpu", "--configfile", "config/ci.yaml", str(single))
    assert done.returncode != 0
    assert "1 is less than the minimum of 2" in done.stdout + done.stderr


# -- what would be submitted: the real profile against stand-in SLURM commands -----------------

STAND_IN = """#!/bin/sh
# Stand-in {name}: records its arguments (and sbatch's script) and answers as SLURM would.
# Each call gets a file of its own (Snakemake submits jobs side by side), its PID the job id.
call=$(mktemp "{log}/{name}.XXXXXXXX")
printf '%s\\n' "$@" > "$call.args"
case {name} in
  sbatch) cat > "$call.stdin"; echo $$ ;;
  sacctmgr) echo test-account ;;
esac
exit 0
"""
# The rules whose inputs no other job makes (the stand-in finishes no job: the
# confirmations, which wait for their screens' finalists, are never submitted).
CPU_RULES = {"cpu_run", "mpi_run", "compare_bench"}
GPU_RULES = {"gpu_run", "kernel_bw_sweep", "nsys_profile_gpu"}
MPI_RULES = {"mpi_run", "mpi_confirm", "compare_bench"}


def _submitted(log) -> dict[str, list[list[str]]]:
    """sbatch's arguments by rule (from --comment rule_<name>_wildcards_...)."""
    calls: dict[str, list[list[str]]] = {}
    for path in sorted(log.glob("sbatch.*.args")):
        args = path.read_text().splitlines()
        comment = args[args.index("--comment") + 1]
        rule = comment.removeprefix("rule_").split("_wildcards_")[0]
        calls.setdefault(rule, []).append(args)
    return calls


def _option(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_profile_submits_each_rule_where_and_as_it_should(workdir, stubs, tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    log = tmp_path / "log"
    log.mkdir()
    bin_dir = tmp_path / "slurm_bin"
    bin_dir.mkdir()
    for name in ("sbatch", "sacct", "squeue", "sacctmgr", "sinfo", "scontrol", "scancel"):
        path = bin_dir / name
        path.write_text(STAND_IN.format(name=name, log=log))
        path.chmod(0o755)
    environ = {k: v for k, v in job_env().items() if not k.startswith("RING_SLURM_")}
    environ.update(SLURM_ENV, RING_SLURM_GPU_PARTITION="test-gpu-partition")
    environ["PATH"] = f"{bin_dir}:{environ['PATH']}"
    command = [tool("snakemake"), "--profile", "profiles/slurm", "all"]
    command += ["--configfile", "config/ci.yaml", pinned_config(tmp_path, stubs)]
    # Every job at once (the stand-in never finishes one): more than the profile's 20.
    command += ["--config", "gpus=4", "--jobs", "100"]
    run = subprocess.Popen(
        command,
        cwd=workdir,
        env=environ,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Snakemake submits at the profile's pace; a loaded 2-core machine needs minutes.
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and run.poll() is None:
            if set(_submitted(log)) >= CPU_RULES | GPU_RULES:
                break
            time.sleep(1)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=60)
    calls = _submitted(log)
    assert set(calls) >= CPU_RULES | GPU_RULES, sorted((CPU_RULES | GPU_RULES) - set(calls))
    for rule, submissions in calls.items():
        for args in submissions:
            assert _option(args, "-A") == "test-account", (rule, args)
            partition = "test-gpu-partition" if rule in GPU_RULES else "test-partition"
            assert _option(args, "-p") == partition, (rule, args)
            if rule in TIMED | {"compare_bench", "nsys_profile_gpu"}:
                assert "--exclusive" in args, (rule, args)
            # MPI comparisons get the ranks they launch (srun inside the job), one task each.
            if rule in MPI_RULES:
                wildcards = _option(args, "--comment").split("_wildcards_")[1].split("_")
                nodes = next(w for w in wildcards if w.isdigit())  # run, nodes, dtype
                assert f"--ntasks={nodes}" in args, (rule, args)
