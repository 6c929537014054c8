"""The Snakemake workflow, without running a benchmark: dry-run plans of every target (its
one-line stops, config validation, lint and formatting: test_workflow_stops.py).

Each test runs Snakemake in a copy of the workflow files, so nothing is written to the
checkout. GPUs, MPI and nsys are pinned by config (``gpus``, ``mpi.launcher``,
``nsys.executable``) so that the plans do not depend on this machine.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from workflow_helpers import (
    ALL_ALGORITHMS,
    COMPARE_JOBS,
    CONFIRM_JOBS,
    CPU_BACKENDS,
    CPU_JOBS,
    MPI_JOBS,
    ORIGINAL_JOBS,
    ROOT,
    TIMED_RULES,
    counts,
    dry_run,
    job_env,
    needs_mpi4py,
    parse_plan,
    pinned_config,
    snakemake,
)

# Slow (tests/tiers.py): Snakemake dry runs of the workflow.
pytestmark = pytest.mark.slow

# -- plans -------------------------------------------------------------------------------


def _runs(jobs, rule: str, run: str) -> list:
    return [job for job in jobs if job.rule == rule and job.wildcards.get("run") == run]


@needs_mpi4py
def test_all_without_gpu_plans_cpu_mpi_profile_and_report(workdir, stubs, tmp_path):
    jobs = dry_run(workdir, ["all"], pinned_config(tmp_path, stubs), config_args=["gpus=0"])
    assert counts(jobs) == {
        # cpu: a sweep and a screen per N and the original's size; mpi: a sweep and a screen
        "cpu_run": 2 * CPU_JOBS + ORIGINAL_JOBS,
        "mpi_run": 2 * MPI_JOBS,
        "finalists": CONFIRM_JOBS["cpu"] + CONFIRM_JOBS["mpi"],
        "cpu_confirm": CONFIRM_JOBS["cpu"],
        "mpi_confirm": CONFIRM_JOBS["mpi"],
        "model_fit": 2,
        "compare_bench": COMPARE_JOBS,
        "nsys_profile_cpu": 1,
        "nsys_overhead_cpu": 1,
        "not_measured": 1,
        "build_report": 1,
        "all": 1,
    }
    sweeps = _runs(jobs, "cpu_run", "sweep")
    assert {Path(job.output[0]).name for job in sweeps} == {
        f"sweep_n{nodes}_float32.csv" for nodes in (2, 3)
    }
    cpu_shell = sweeps[0].shell
    assert f"--backend {','.join(CPU_BACKENDS)}" in cpu_shell
    # The sweeps time out of place too (nccl-tests' tables); the screens in place only.
    assert "--out-of-place 1" in cpu_shell
    report = next(job for job in jobs if job.rule == "build_report")
    assert report.output == [
        "results/figures",
        "results/report/index.html",
        "results/report/report.md",
        "results/report/appendix.md",
        "results/report/appendix.html",
    ]
    assert report.shell.count("--sweep ") == 2 * (CPU_JOBS + MPI_JOBS) + ORIGINAL_JOBS
    assert report.shell.count("--confirm ") == 2 and report.shell.count("--fit ") == 2
    # Every algorithm in one run per N (the screen), over the algorithms' own (ci: tiny)
    # size range, beside the kind's peers; the ring-only sweeps stay as they were.
    for rule, kind in (("cpu_run", "cpu"), ("mpi_run", "mpi")):
        (screen, *_) = _runs(jobs, rule, "algorithms")
        assert f"--algorithm {ALL_ALGORITHMS}" in screen.shell and "-e 16K -f 4" in screen.shell
        assert f"--sweep results/{kind}/algorithms_n2_float32.csv" in report.shell
    assert "--algorithm" not in cpu_shell
    (cpu_screen, *_) = _runs(jobs, "cpu_run", "algorithms")
    assert "--sync pairwise " in cpu_screen.shell and "--executor nodes,slices " in cpu_screen.shell
    assert f"--backend {','.join(CPU_BACKENDS)} " in cpu_screen.shell, cpu_screen.shell
    (mpi_screen,) = _runs(jobs, "mpi_run", "algorithms")
    assert "--backend mpi,mpi-allreduce " in mpi_screen.shell, mpi_screen.shell
    assert "--executor" not in mpi_screen.shell and "--executor" not in cpu_shell
    # The confirmations: launch sets of the screen's finalists, the screen's flags.
    (confirm,) = [j for j in jobs if j.rule == "cpu_confirm"]
    assert "launches --launches 3 --finalists results/cpu/finalists_n2_float32.json" in (
        confirm.shell
    )
    assert "--executor nodes,slices" in confirm.shell and "-e 16K -f 4" in confirm.shell
    (confirm,) = [j for j in jobs if j.rule == "mpi_confirm"]
    assert "--launcher '" in confirm.shell and "mpirun --oversubscribe -n 2'" in confirm.shell
    (original,) = _runs(jobs, "cpu_run", "original")
    assert "-b 64K -e 64K" in original.shell and "--executor nodes,slices" in original.shell
    assert report.shell.count("--alternated ") == COMPARE_JOBS
    compare = next(job for job in jobs if job.rule == "compare_bench")
    assert "alternate --nodes 2 --rounds 2" in compare.shell and "-- -d float32" in compare.shell
    assert "--profile results/profiles/cpu" in report.shell
    # The profiler's cost from config/ci.yaml's single pair of runs (the default takes 3).
    overhead = next(job for job in jobs if job.rule == "nsys_overhead_cpu")
    assert "--repeats 1 " in overhead.shell, overhead.shell


@needs_mpi4py
def test_ring_sweeps_time_out_and_mpi_ranks_abort_together(workdir, stubs, tmp_path):
    jobs = dry_run(workdir, ["cpu", "mpi"], pinned_config(tmp_path, stubs))
    for job in jobs:
        if job.rule == "mpi_run":
            # One rank's exception ends the job (mpi4py's runner), and a hang ends in time.
            assert " python -m mpi4py -m ring.bench " in job.shell, job.shell
        if job.rule in ("mpi_run", "cpu_run", "cpu_confirm", "mpi_confirm"):
            assert "--timeout 3600" in job.shell, job.shell


def test_all_with_four_gpus_adds_gpu_sweeps_kernel_and_profiles(workdir, stubs, tmp_path):
    jobs = dry_run(
        workdir, ["all"], pinned_config(tmp_path, stubs, mpi=False), config_args=["gpus=4"]
    )
    plan = counts(jobs)
    assert plan["gpu_run"] == 6
    assert plan["kernel_bw_sweep"] == 1
    assert plan["nsys_profile_gpu"] == 2
    assert plan["mpi_run"] == 0
    gpu = sorted(
        (job.wildcards["run"], job.wildcards["nodes"]) for job in jobs if job.rule == "gpu_run"
    )
    assert gpu == [
        ("algorithms", "2"),
        ("algorithms", "4"),
        ("gpu", "2"),
        ("gpu", "4"),
        ("nccl", "2"),
        ("nccl", "4"),
    ]
    for job in jobs:
        if job.rule == "gpu_run":
            assert job.resources["gpu"] == job.wildcards["nodes"]
            backend = "gpu" if job.wildcards["run"] == "algorithms" else job.wildcards["run"]
            assert f"--backend {backend} " in job.shell
    report = next(job for job in jobs if job.rule == "build_report")
    assert "--kernel-bw results/gpu/kernel_bw_float32.csv" in report.shell
    assert "--profile results/profiles/4gpu" in report.shell


def test_two_gpus_leave_out_n4_unless_devices_may_be_shared(workdir, stubs, tmp_path):
    pinned = pinned_config(tmp_path, stubs, mpi=False)
    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=2"])
    assert {job.wildcards["nodes"] for job in jobs if job.rule == "gpu_run"} == {"2"}
    assert [job.wildcards["nodes"] for job in jobs if job.rule == "nsys_profile_gpu"] == ["2"]

    shared = dry_run(workdir, ["all"], pinned, config_args=["gpus=2", "shared_devices=True"])
    runs = [job for job in shared if job.rule == "gpu_run"]
    sweeps = [job for job in runs if job.wildcards["run"] != "algorithms"]
    n4 = [job for job in sweeps if job.wildcards["nodes"] == "4"]
    # NCCL cannot place two nodes on one device; our ring can, and says so.
    assert [job.wildcards["run"] for job in n4] == ["gpu"]
    assert n4[0].resources["gpu"] == "2"
    assert "--shared-devices 1" in n4[0].shell
    n2 = [job for job in sweeps if job.wildcards["nodes"] == "2"]
    assert len(n2) == 2 and all("--shared-devices" not in job.shell for job in n2)
    algorithms = {
        j.wildcards["nodes"]: j
        for j in shared
        if j.rule == "gpu_run" and j.wildcards["run"] == "algorithms"
    }
    assert "--shared-devices 1" in algorithms["4"].shell and algorithms["4"].resources["gpu"] == "2"
    profile = next(
        job for job in shared if job.rule == "nsys_profile_gpu" and job.wildcards["nodes"] == "4"
    )
    assert "--gpus 2" in profile.shell and "--shared-devices 1" in profile.shell


def test_gpus_auto_counts_what_nvidia_smi_lists_and_cuda_lets_us_see(workdir, stubs, tmp_path):
    fake = tmp_path / "fake-driver"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        '[ "$1" = -L ] || exit 2\n'
        "echo 'GPU 0: NVIDIA H200 (UUID: GPU-0000)'\n"
        "echo 'GPU 1: NVIDIA H200 (UUID: GPU-0001)'\n"
    )
    smi.chmod(0o755)
    env = job_env()
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    pinned = pinned_config(tmp_path, stubs, mpi=False)

    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=auto"], env=env)
    plan = counts(jobs)
    assert {job.wildcards["nodes"] for job in jobs if job.rule == "gpu_run"} == {"2"}
    assert plan["gpu_run"] == 3 and plan["kernel_bw_sweep"] == 1
    assert [job.wildcards["nodes"] for job in jobs if job.rule == "nsys_profile_gpu"] == ["2"]

    env["CUDA_VISIBLE_DEVICES"] = "1"
    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=auto"], env=env)
    plan = counts(jobs)
    assert plan["gpu_run"] == 0 and plan["kernel_bw_sweep"] == 1


@pytest.mark.parametrize(
    ("target", "config_args", "expected"),
    [
        (
            "cpu",
            [],
            {"cpu_run": 2 * CPU_JOBS + ORIGINAL_JOBS, "finalists": 1, "cpu_confirm": 1, "cpu": 1},
        ),
        pytest.param(
            "mpi",
            [],
            {"mpi_run": 2 * MPI_JOBS, "finalists": 1, "mpi_confirm": 1, "mpi": 1},
            marks=needs_mpi4py,
        ),
        ("gpu", ["gpus=4"], {"gpu_run": 6, "gpu": 1}),
        ("kernel_bw", ["gpus=4"], {"kernel_bw_sweep": 1, "kernel_bw": 1}),
        ("nsys_cpu", [], {"nsys_profile_cpu": 1, "nsys_overhead_cpu": 1, "nsys_cpu": 1}),
        ("nsys_2gpu", ["gpus=4"], {"nsys_profile_gpu": 1, "nsys_2gpu": 1}),
        ("nsys_4gpu", ["gpus=4"], {"nsys_profile_gpu": 1, "nsys_4gpu": 1}),
    ],
)
def test_named_target_plans_its_stage_only(workdir, stubs, tmp_path, target, config_args, expected):
    jobs = dry_run(workdir, [target], pinned_config(tmp_path, stubs), config_args=config_args)
    assert counts(jobs) == expected
    if target.startswith("nsys_") and target != "nsys_cpu":
        profile = next(job for job in jobs if job.rule == "nsys_profile_gpu")
        assert profile.wildcards["nodes"] == target.removeprefix("nsys_").removesuffix("gpu")
        assert profile.output[0] == f"results/profiles/{profile.wildcards['nodes']}gpu/" + (
            f"{profile.wildcards['nodes']}gpu.nsys-rep"
        )


def test_report_target_builds_the_report_from_everything_measurable(workdir, stubs, tmp_path):
    pinned = pinned_config(tmp_path, stubs, mpi=False)
    jobs = dry_run(workdir, ["report"], pinned, config_args=["gpus=0"])
    assert counts(jobs) == {
        "cpu_run": 2 * CPU_JOBS + ORIGINAL_JOBS,
        "finalists": 1,
        "cpu_confirm": 1,
        "model_fit": 1,
        "nsys_profile_cpu": 1,
        "nsys_overhead_cpu": 1,
        "not_measured": 1,
        "build_report": 1,
        "report": 1,
    }
    report = next(job for job in jobs if job.rule == "build_report")
    assert "--not-measured results/report/not_measured.json" in report.shell


def test_every_timed_job_takes_the_exclusive_resource(workdir, stubs, tmp_path):
    jobs = dry_run(workdir, ["all"], pinned_config(tmp_path, stubs), config_args=["gpus=4"])
    planned = {job.rule for job in jobs}
    mpi = importlib.util.find_spec("mpi4py") is not None
    without_mpi = TIMED_RULES - {"mpi_run", "mpi_confirm", "compare_bench"}
    assert planned >= (TIMED_RULES if mpi else without_mpi)
    for job in jobs:
        if job.rule in TIMED_RULES:
            assert job.resources.get("bench") == "1", job
        elif job.resources:
            assert job.resources.get("bench", "0") == "0", job


def test_default_profile_allows_one_timed_job_at_a_time():
    import yaml

    profile = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())
    assert profile["resources"] == {"bench": 1}
    # Keys a cluster profile given with --profile sets itself would be replaced by these.
    assert not {"cores", "default-resources", "set-resources", "executor"} & set(profile)


def test_slurm_profile_requests_gpus_tasks_and_srun():
    import yaml

    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert "RING_SLURM_PARTITION" in profile["default-resources"]["slurm_partition"]
    assert "RING_SLURM_ACCOUNT" in profile["default-resources"]["slurm_account"]
    rules = profile["set-resources"]
    assert rules["mpi_run"]["mpi"] == rules["mpi_confirm"]["mpi"] == "srun"
    for rule in ("gpu_run", "kernel_bw_sweep", "nsys_profile_gpu"):
        assert rules[rule]["cpus_per_gpu"] >= 1
    bench = (ROOT / "workflow/rules/bench.smk").read_text()
    assert "{resources.mpi} -n {resources.tasks}" in bench


def test_slurm_profile_dry_run_submits_nothing(workdir, stubs, tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    done = snakemake(
        workdir,
        "-n",
        "all",
        "--workflow-profile",
        "profiles/slurm",
        "--configfile",
        "config/ci.yaml",
        pinned_config(tmp_path, stubs),
        "--config",
        "gpus=4",
        env={**job_env(), "RING_SLURM_PARTITION": "gpu", "RING_SLURM_ACCOUNT": "project"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert counts(parse_plan(done.stdout + done.stderr))["gpu_run"] == 6
