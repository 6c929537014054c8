"""What this machine offers the study (GPUs, an MPI launcher, nsys, a C++ compiler).

Probed once, when the workflow builds its DAG; cheap, and never raises: a missing piece
is recorded with the reason, and the plan leaves out what needs it.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ..machine import count_gpus

__all__ = ["Machine", "Probe", "job_environment", "probe_machine"]


@dataclass(frozen=True)
class Probe:
    """Whether a piece is usable here, and in one phrase why (not)."""

    ok: bool
    why: str


@dataclass(frozen=True)
class Machine:
    gpus: int
    gpus_how: str  # where the count comes from, as a phrase
    mpi: Probe
    nsys: Probe
    cxx: Probe


def probe_machine(config: Mapping) -> Machine:
    gpus, how = _probe_gpus(config["gpus"])
    return Machine(
        gpus, how, _probe_mpi(config["mpi"]["launcher"]), _probe_nsys(config), _probe_cxx()
    )


def _probe_gpus(setting) -> tuple[int, str]:
    if setting == "auto":
        count, how = count_gpus(ask_cupy=True)
        return count, f"found {count} ({how})"
    return int(setting), f"the config sets gpus: {setting}"


def _probe_mpi(launcher_command: str) -> Probe:
    launcher = shlex.split(launcher_command)[0]
    if shutil.which(launcher) is None:
        return Probe(False, f"MPI launcher {launcher!r} not found on PATH")
    if not _jobs_have("mpi4py"):
        return Probe(False, "the Python package mpi4py is not installed")
    return Probe(True, f"{launcher} and mpi4py found")


def _probe_nsys(config: Mapping) -> Probe:
    executable = config["nsys"]["executable"]
    found = shutil.which(executable)
    if found is None:
        return Probe(False, f"Nsight Systems ({executable!r}) not found on PATH")
    return Probe(True, f"nsys at {found}")


def _probe_cxx() -> Probe:
    """seed-cpp compiles the original study's C++ design on first use (CXX, default g++)."""
    try:
        from ..bench.seed_cpp.build import compiler_problem
    except ImportError:  # no NumPy in Snakemake's own environment: the same test, here
        compiler = (shlex.split(os.environ.get("CXX", "")) or ["g++"])[0]
        found = shutil.which(compiler)
        return Probe(bool(found), "a C++ compiler found" if found else f"{compiler!r} not on PATH")
    problem = compiler_problem()
    return Probe(problem is None, problem or "a C++ compiler found")


def _jobs_have(module: str) -> bool:
    """Whether the jobs' Python (see :func:`job_environment`, which runs first) can import
    ``module``: this one's, or the project's when Snakemake runs from an environment of its
    own; under --sdm conda the rules' environments bring it (envs/mpi.yaml)."""
    if importlib.util.find_spec("numpy") is not None:
        return importlib.util.find_spec(module) is not None
    python = shutil.which("python")
    # (A virtual environment's python is a link to the base one: compare folders, not files.)
    if python is None or os.path.dirname(python) == os.path.dirname(sys.executable):
        return _deployment_conda
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([python, "-c", probe], check=False).returncode == 0


_deployment_conda = False


def job_environment(conda: bool = False, project_env: str = ".venv") -> None:
    """Make the jobs' `python -m ring...` the project's Python, and let Open MPI run as root.

    That is the Python that runs Snakemake (the project's virtual environment) even when it
    is not activated, unless Snakemake runs from an environment of its own without the
    project (no NumPy there): then ``project_env`` (scripts/setup.sh's .venv) when it exists,
    else the rules' conda environments (``conda``: --sdm conda), else a note on stderr.
    """
    global _deployment_conda
    _deployment_conda = conda
    # Jobs under --sdm conda activate their own environment, which then comes first.
    interpreter_bin = os.path.dirname(sys.executable)
    if importlib.util.find_spec("numpy") is None:
        project_bin = os.path.abspath(os.path.join(project_env, "bin"))
        if shutil.which("python", path=project_bin):
            interpreter_bin = project_bin
        elif not conda:
            print(
                f"note: this Snakemake's Python ({sys.executable}) has no NumPy and there is "
                f"no {project_env}: jobs need the project, from `bash scripts/setup.sh` or "
                "--sdm conda (the rules' envs/)",
                file=sys.stderr,
            )
    if shutil.which("python", path=interpreter_bin):
        os.environ["PATH"] = os.pathsep.join([interpreter_bin, os.environ.get("PATH", "")])
    if os.geteuid() == 0:
        # Containers and CI runners run as root, which Open MPI refuses without these; other
        # MPI libraries ignore them.
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
