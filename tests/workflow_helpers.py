"""What the workflow tests share: a copy of the workflow files to run Snakemake in, stub
``nsys`` and ``mpirun``, a config that pins them, dry runs parsed into jobs, and what
``config/ci.yaml`` plans."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_bench import SMALL_CEILINGS_ENV

from ring.bench.seed_cpp.build import compiler_problem

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_PATHS = ("Snakefile", "config", "workflow", "profiles", "envs")
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install {name})")
    return found


def copy_workflow(dest: Path, extra: tuple[str, ...] = ()) -> Path:
    """The workflow files (and ``extra`` paths) copied to ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_PATHS + extra:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    return dest


def job_env() -> dict[str, str]:
    """This interpreter's bin first on PATH: jobs run `python -m ring...`."""
    env = {**os.environ, **SMALL_CEILINGS_ENV}  # the jobs test the workflow, not the machine
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def snakemake(
    workdir: Path, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("snakemake"), *args],
        cwd=workdir,
        env=job_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Job:
    rule: str
    output: list[str] = field(default_factory=list)
    wildcards: dict[str, str] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)
    shell: str = ""


_JOB_START = re.compile(r"^(?:local)?rule (\w+):$")


def parse_plan(text: str) -> list[Job]:
    """The jobs of a dry run, from Snakemake's per-job blocks."""
    jobs: list[Job] = []
    for line in text.splitlines():
        start = _JOB_START.match(line.strip())
        if start:
            jobs.append(Job(start.group(1)))
            continue
        if not jobs:
            continue
        key, _, value = line.strip().partition(": ")
        if key == "output":
            jobs[-1].output = value.split(", ")
        elif key == "wildcards":
            jobs[-1].wildcards = dict(item.split("=", 1) for item in value.split(", "))
        elif key == "resources":
            jobs[-1].resources = dict(
                item.split("=", 1) for item in value.split(", ") if "=" in item
            )
        elif line.startswith("Shell command:"):
            jobs[-1].shell = line.removeprefix("Shell command:").strip()
    return jobs


def pinned_config(tmp: Path, stubs: dict[str, str], *, mpi: bool = True, nsys: bool = True):
    """A config file that fixes where mpirun and nsys are (present as stubs, or absent)."""
    launcher = f"{stubs['mpirun']} --oversubscribe" if mpi else "no-such-mpirun"
    executable = stubs["nsys"] if nsys else "no-such-nsys"
    path = tmp / f"pinned_mpi{int(mpi)}_nsys{int(nsys)}.yaml"
    path.write_text(f"mpi:\n  launcher: {launcher}\nnsys:\n  executable: {executable}\n")
    return str(path)


def dry_run(workdir: Path, targets, *configs: str, config_args=(), env=None) -> list[Job]:
    args = ["-n", *targets, "--configfile", "config/ci.yaml", *configs]
    if config_args:
        args += ["--config", *config_args]
    done = snakemake(workdir, *args, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return parse_plan(done.stdout + done.stderr)


def counts(jobs: list[Job]) -> Counter:
    return Counter(job.rule for job in jobs)


needs_mpi4py = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed"
)

# config/ci.yaml: cpu nodes [2, 3] and mpi nodes [2], one job per N holding every backend of
# the kind; gpu backends 2 x nodes [2, 4]; one dtype.
CPU_BACKENDS = ("cpu", "numpy-direct", *(("seed-cpp",) if compiler_problem() is None else ()))
CPU_JOBS = 2
MPI_JOBS = 1
# The threaded ring against MPI_Allreduce, alternated launches: one job per mpi N.
COMPARE_JOBS = 1
# The algorithm sweeps (config key `algorithms`): one job per N of their kind.
ALL_ALGORITHMS = (
    "ring,ring-segmented,ring-bidirectional,recursive-doubling,rabenseifner,hierarchical,direct,"
    "reduce-broadcast"
)
# config/ci.yaml's confirmation (every screened N, cpu and mpi: one launch set each) and its
# run at the original study's size (cpu N = 2).
CONFIRM_JOBS = {"cpu": 1, "mpi": 1}
ORIGINAL_JOBS = 1
TIMED_RULES = {
    "cpu_run",
    "mpi_run",
    "cpu_confirm",
    "mpi_confirm",
    "compare_bench",
    "nsys_overhead_cpu",
    "gpu_run",
    "kernel_bw_sweep",
    "nsys_profile_cpu",
    "nsys_profile_gpu",
}
