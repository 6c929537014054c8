"""The study's results, the workflow targets that make them, and what each needs.

The workflow plans from these names and the report checks its inputs against them, so a
target is named once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import PROFILE_GPUS

__all__ = [
    "COMPILED_BACKENDS",
    "DEVICE_PER_NODE",
    "EXPECTED",
    "MPI_HINT",
    "NSYS_HINT",
    "NSYS_INSTALL",
    "PROFILE_GPUS",
    "TARGETS",
    "Expected",
    "command",
]


@dataclass(frozen=True)
class Expected:
    """A result the full study has, the workflow target that makes it, and what it needs."""

    key: str
    what: str
    target: str
    needs: str  # "" | "mpi" | "gpu" | "nsys" | "nsys+gpu"


EXPECTED = (
    Expected("cpu pairwise", "CPU ring (threads), pairwise synchronisation", "cpu", ""),
    Expected("cpu barrier", "CPU ring (threads), barrier after every step", "cpu", ""),
    Expected("numpy-direct", "shared-memory optimum (one ufunc pass per chunk)", "cpu", ""),
    Expected("seed-cpp", "the original study's C++20 CPU ring (std::barrier)", "cpu", ""),
    Expected("mpi-allreduce", "MPI_Allreduce through mpi4py", "mpi", "mpi"),
    Expected("mpi", "the ring over MPI ranks", "mpi", "mpi"),
    Expected("gpu", "GPU ring (CuPy, one device per node)", "gpu", "gpu"),
    Expected("nccl", "NCCL allreduce", "gpu", "gpu"),
    Expected("kernel_bw", "single-GPU reduction-kernel bandwidth sweep", "kernel_bw", "gpu"),
    Expected("nsys_cpu", "Nsight Systems profile of the CPU ring", "nsys_cpu", "nsys"),
    *(
        Expected(
            f"nsys_{name}",
            f"Nsight Systems profile of the GPU ring, N = {nodes}",
            f"nsys_{name}",
            "nsys+gpu",
        )
        for name, nodes in PROFILE_GPUS.items()
    ),
)
# The workflow's named targets (``snakemake --cores 8 <target>``), besides `all` and `report`.
TARGETS = tuple(dict.fromkeys(expected.target for expected in EXPECTED))

# CPU backends that need a C++ compiler; without one they are left out and listed.
COMPILED_BACKENDS = frozenset({"seed-cpp"})
# NCCL builds one communicator over distinct devices: it cannot share one among nodes.
DEVICE_PER_NODE = frozenset({"nccl"})

MPI_HINT = (
    "install Open MPI and mpi4py: apt-get install openmpi-bin libopenmpi-dev "
    "&& pip install '.[mpi]' (scripts/setup.sh does both)"
)
NSYS_INSTALL = "sudo sh scripts/install_nsys.sh"
NSYS_HINT = f"install it with: {NSYS_INSTALL} (Debian 12), or use a CUDA toolkit's nsys"


def command(target: str) -> str:
    """The command that makes ``target``'s results."""
    return f"snakemake --cores 8 {target}"
