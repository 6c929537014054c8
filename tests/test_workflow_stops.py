"""The Snakemake workflow's one-line stops when a piece is missing, its config validation,
lint and formatting (dry runs; nothing is measured)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from workflow_helpers import (
    CPU_JOBS,
    ORIGINAL_JOBS,
    ROOT,
    copy_workflow,
    counts,
    dry_run,
    job_env,
    pinned_config,
    snakemake,
    tool,
)

# Slow (tests/tiers.py): Snakemake runs of the workflow.
pytestmark = pytest.mark.slow

# -- stops before anything runs ------------------------------------------------------------


def stop_line(workdir: Path, target: str, pinned: str, *config_args: str) -> str:
    """Run a real (not dry) target that must stop while the DAG is built; its one line."""
    args = ["--cores", "1", target, "--configfile", "config/ci.yaml", pinned]
    if config_args:
        args += ["--config", *config_args]
    done = snakemake(workdir, *args)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not (workdir / "results").exists(), "a job ran before the stop"
    return lines[0]


def test_nsys_4gpu_with_fewer_gpus_stops_with_one_line(workdir, stubs, tmp_path):
    line = stop_line(workdir, "nsys_4gpu", pinned_config(tmp_path, stubs), "gpus=2")
    assert line.startswith("error: target nsys_4gpu: needs 4 GPUs")
    assert "shared_devices" in line


def test_nsys_targets_without_nsys_name_the_install_helper(workdir, stubs, tmp_path):
    line = stop_line(workdir, "nsys_cpu", pinned_config(tmp_path, stubs, nsys=False))
    assert "no-such-nsys" in line and "scripts/install_nsys.sh" in line


def test_gpu_targets_without_gpus_stop(workdir, stubs, tmp_path):
    pinned = pinned_config(tmp_path, stubs)
    assert "needs 2 GPUs" in stop_line(workdir, "gpu", pinned, "gpus=0")
    assert "needs 1 GPU" in stop_line(workdir, "kernel_bw", pinned, "gpus=0")


def test_mpi_target_without_launcher_stops(workdir, stubs, tmp_path):
    line = stop_line(workdir, "mpi", pinned_config(tmp_path, stubs, mpi=False))
    assert "no-such-mpirun" in line and "openmpi-bin" in line


def test_all_without_nsys_or_mpi_still_plans_the_rest(workdir, stubs, tmp_path):
    pinned = pinned_config(tmp_path, stubs, mpi=False, nsys=False)
    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=0"])
    assert counts(jobs) == {
        "cpu_run": 2 * CPU_JOBS + ORIGINAL_JOBS,
        "finalists": 1,
        "cpu_confirm": 1,
        "model_fit": 1,
        "not_measured": 1,
        "build_report": 1,
        "all": 1,
    }


def test_without_a_compiler_all_leaves_out_seed_cpp_and_says_why(tmp_path, stubs):
    import json

    workdir = copy_workflow(tmp_path / "wf")
    pinned = pinned_config(tmp_path, stubs, mpi=False, nsys=False)
    env = dict(job_env(), CXX="/nonexistent/g++")
    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=0"], env=env)
    # A sweep and a screen per N, the original's size and the confirmation: every backend.
    cpu = [job for job in jobs if job.rule in ("cpu_run", "cpu_confirm")]
    assert len(cpu) == 2 * CPU_JOBS + ORIGINAL_JOBS + 1, [job.shell for job in cpu]
    assert all("--backend cpu,numpy-direct " in job.shell for job in cpu), [j.shell for j in cpu]
    args = ["--cores", "1", "results/report/not_measured.json", "--configfile", "config/ci.yaml"]
    done = snakemake(workdir, *args, pinned, "--config", "gpus=0", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads((workdir / "results/report/not_measured.json").read_text())
    seed = next(entry for entry in entries if entry["what"] == "CPU sweeps (seed-cpp)")
    assert "/nonexistent/g++" in seed["why"] and "apt-get install g++" in seed["why"]
    assert seed["how"].endswith("snakemake --cores 8 cpu")


def test_not_measured_says_what_is_absent_and_why(tmp_path, stubs):
    import json

    workdir = copy_workflow(tmp_path / "wf")
    pinned = pinned_config(tmp_path, stubs, mpi=False, nsys=False)
    done = snakemake(
        workdir,
        "--cores",
        "1",
        "results/report/not_measured.json",
        "--configfile",
        "config/ci.yaml",
        pinned,
        "--config",
        "gpus=0",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads((workdir / "results/report/not_measured.json").read_text())
    by_what = {entry["what"]: entry for entry in entries}
    assert set(by_what) == {
        "MPI sweeps (mpi, mpi-allreduce)",
        "GPU sweeps at N = 2 (gpu, nccl)",
        "GPU sweeps at N = 4 (gpu, nccl)",
        "reduction kernel bandwidth (one GPU)",
        "Nsight Systems profile cpu",
        "Nsight Systems profile 2gpu",
        "Nsight Systems profile 4gpu",
    }
    assert "gpus: 0" in by_what["GPU sweeps at N = 4 (gpu, nccl)"]["why"]
    assert "no-such-mpirun" in by_what["MPI sweeps (mpi, mpi-allreduce)"]["why"]
    assert "scripts/install_nsys.sh" in by_what["Nsight Systems profile cpu"]["how"]
    assert by_what["GPU sweeps at N = 4 (gpu, nccl)"]["how"].endswith("snakemake --cores 8 gpu")


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpu:\n  nodes: [0, 2]\n", "0 is less than the minimum of 1"),
        ("bench:\n  max_bytes: 64X\n", "'64X' is not valid under any of the given schemas"),
        ("gpus: some\n", "'some' is not valid under any of the given schemas"),
        ("cpu:\n  sync: [spin]\n", "'spin' is not one of ['pairwise', 'barrier']"),
        ("cpu:\n  node: [2]\n", "('node' was unexpected)"),
        (
            "bench:\n  min_bytes: 1M\n  max_bytes: 1K\n",
            "cpu sweep has min_bytes 1M above max_bytes 1K",
        ),
        ("nsys:\n  profiles:\n    4gpu:\n      nodes: 2\n", "profile '4gpu' profiles 4 nodes"),
    ],
)
def test_bad_config_values_are_named(workdir, tmp_path, text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    done = snakemake(workdir, "-n", "--configfile", str(bad))
    assert done.returncode == 1
    assert message in done.stdout + done.stderr, done.stdout + done.stderr


def test_shipped_configs_validate(workdir):
    for name in ("config.yaml", "full.yaml", "ci.yaml"):
        done = snakemake(workdir, "-n", "cpu", "--configfile", f"config/{name}")
        assert done.returncode == 0, f"{name}: {done.stderr}"


# -- lint and format ---------------------------------------------------------------------------


def test_snakemake_lint_finds_nothing(workdir):
    done = snakemake(workdir, "--lint")
    assert done.returncode == 0, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert "Lints for" not in output
    assert "Congratulations, your workflow is in a good condition!" in output


def test_snakefmt_check_passes():
    done = subprocess.run(
        [tool("snakefmt"), "--check", "Snakefile", "workflow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_named_configs_plan_disjoint_results_and_the_default_keeps_its_paths(
    workdir, stubs, tmp_path
):
    pinned = pinned_config(tmp_path, stubs, mpi=False)

    def outputs(*config_args):
        jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=0", *config_args])
        return {path for job in jobs for path in job.output}, jobs

    default, _ = outputs()
    assert {
        "results/cpu/sweep_n2_float32.csv",
        "results/profiles/cpu/overhead.json",
        "results/report/not_measured.json",
        "results/report/index.html",
        "results/figures",
    } <= default
    assert all(path.startswith("results/") for path in default)
    small, small_jobs = outputs("name=small")
    big, _ = outputs("name=big")
    assert all(path.startswith("results/small/") for path in small)
    assert not small & big and not small & default
    # The same files, each under its configuration's folder.
    assert {p.removeprefix("results/small/") for p in small} == {
        p.removeprefix("results/") for p in default
    }
    report = next(job for job in small_jobs if job.rule == "build_report")
    assert "--sweep results/small/cpu/sweep_n2_float32.csv" in report.shell
    profile = next(job for job in small_jobs if job.rule == "nsys_profile_cpu")
    assert "--root results/small/profiles " in profile.shell
