"""What this machine offers the study (GPUs, an MPI launcher, nsys, a C++ compiler).

Probed once, when the workflow builds its DAG; cheap, and never raises: a missing piece
is recorded with the reason, and the plan leaves out what needs it.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ..gpu_count import count_gpus

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
    if importlib.util.find_spec("mpi4py") is None:
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
    from ..bench.seed_cpp.build import compiler_problem

    problem = compiler_problem()
    return Probe(problem is None, problem or "a C++ compiler found")


def job_environment() -> None:
    """Make the jobs' `python -m ring...` this interpreter, and let Open MPI run as root."""
    # Jobs find the Python that runs Snakemake (the project's virtual environment) even when
    # it is not activated; jobs under --sdm conda activate their own, which then comes first.
    interpreter_bin = os.path.dirname(sys.executable)
    if shutil.which("python", path=interpreter_bin):
        os.environ["PATH"] = os.pathsep.join([interpreter_bin, os.environ.get("PATH", "")])
    if os.geteuid() == 0:
        # Containers and CI runners run as root, which Open MPI refuses without these; other
        # MPI libraries ignore them.
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
