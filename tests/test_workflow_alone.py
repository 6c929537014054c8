"""Snakemake from an environment of its own (the usual conda habit: `snakemake` alone, no
NumPy) plans the workflow, and its jobs run in the project's environment: .venv (what
scripts/setup.sh builds) when there is one, else a note says what they need.

Offline stand-in for such an environment: this interpreter started without its
site-packages (-S), on a folder that links every installed package except the project's
own dependencies (NumPy and everything above it)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path

import pytest
from workflow_helpers import ROOT, job_env, parse_plan, pinned_config

# What only the project's environment has; Snakemake itself needs none of them.
HIDDEN = ("numpy", "pandas", "matplotlib", "seaborn", "scipy", "cupy", "mpi4py", "nvtx")
# ... nor plugins the project's environment adds (the SLURM one imports pandas).
HIDDEN += ("snakemake_executor_plugin",)
# A package's import name and its metadata folder (numpy-2.4.6.dist-info) start alike.
HIDDEN_PREFIXES = tuple(name.lower() for name in HIDDEN)


@pytest.fixture(scope="module")
def snakemake_alone(tmp_path_factory) -> Path:
    """A folder that stands for a site-packages with Snakemake but none of HIDDEN."""
    folder = tmp_path_factory.mktemp("snakemake_alone")
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        base = entry.name.lower().replace("-", "_").split(".")[0]
        if base.startswith(HIDDEN_PREFIXES) or entry.name.endswith(".pth"):
            continue
        (folder / entry.name).symlink_to(entry)
    return folder


def plan_alone(workdir: Path, folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = job_env()
    # The checkout's ring (the study definition the Snakefile imports), then Snakemake.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(folder)])
    return subprocess.run(
        [sys.executable, "-S", "-m", "snakemake", *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_stand_in_has_no_numpy(snakemake_alone):
    env = {**os.environ, "PYTHONPATH": str(snakemake_alone)}
    probe = "import importlib.util as u; print(u.find_spec('numpy'), u.find_spec('snakemake'))"
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.startswith("None ModuleSpec"), done.stdout


@pytest.mark.slow  # Snakemake plans, three times
def test_snakemake_alone_plans_the_study(workdir, stubs, tmp_path, snakemake_alone):
    config = pinned_config(tmp_path, stubs)
    venv = workdir / ".venv"
    if venv.is_symlink():
        venv.unlink()
    done = plan_alone(workdir, snakemake_alone, "-n", "all", "--configfile", "config/ci.yaml")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    rules = Counter(job.rule for job in parse_plan(output))
    assert rules["cpu_run"] and rules["build_report"], rules
    # No project environment to run the jobs in: one line says what they need.
    assert "has no NumPy and there is no .venv" in output
    assert "Traceback" not in output

    # With the project's .venv (here: the environment running this test), jobs run there,
    # and what its Python has (mpi4py) counts for the plan, as when Snakemake runs from it.
    venv.symlink_to(Path(sys.prefix))
    try:
        done = plan_alone(
            workdir, snakemake_alone, "-n", "all", "--configfile", "config/ci.yaml", config
        )
        alone = done.stdout + done.stderr
        assert done.returncode == 0, alone
        assert "has no NumPy" not in alone
        own = subprocess.run(
            [
                sys.executable,
                "-m",
                "snakemake",
                "-n",
                "all",
                "--configfile",
                "config/ci.yaml",
                config,
            ],
            cwd=workdir,
            env=job_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert own.returncode == 0, own.stdout + own.stderr
        planned = Counter(job.rule for job in parse_plan(alone))
        assert planned == Counter(job.rule for job in parse_plan(own.stdout + own.stderr))
    finally:
        venv.unlink()
