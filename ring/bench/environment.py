"""What the machine was, recorded with every result file.

Each probe returns None when the information is not available (no ``nvidia-smi``, not a
git checkout, no MPI): missing values are null in the JSON, never guessed.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from .. import nvtx
from ..machine import cache_bytes, cpu_model, huge_pages
from .parallel import usable_cores

__all__ = [
    "collect_environment",
    "git_commit",
    "launch_command",
    "memory_bytes",
    "mpi_version",
    "utc_now",
]

_PROBE_TIMEOUT_S = 10
_PROJECT_DIR = Path(__file__).resolve().parents[2]


def utc_now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _run(argv: list[str], cwd: Path | None = None) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_commit() -> tuple[str | None, bool | None]:
    """The project's commit and whether tracked files differ from it (None outside git)."""
    head = _run(["git", "rev-parse", "HEAD"], cwd=_PROJECT_DIR)
    if not head:
        return None, None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_PROJECT_DIR)
    return head.strip(), None if status is None else bool(status.strip())


def memory_bytes() -> int | None:
    """Physical memory of this machine, or None where the system does not say."""
    try:
        text = Path("/proc/meminfo").read_text()
        match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
        if match:
            return int(match.group(1)) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _packages() -> dict[str, str]:
    versions = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions[name] = dist.version
    return dict(sorted(versions.items(), key=lambda item: item[0].lower()))


def parse_gpus(query_csv: str) -> list[dict]:
    """Rows of ``nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id,driver_version
    --format=csv,noheader,nounits``."""
    gpus = []
    for line in query_csv.strip().splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) < 5:
            continue
        index, name, memory, bus, driver = fields[:5]
        gpus.append(
            {
                "index": int(index) if index.isdigit() else index,
                "name": name,
                "memory_bytes": int(memory) << 20 if memory.isdigit() else None,
                "pci_bus_id": bus,
                "driver": driver,
            }
        )
    return gpus


def parse_cuda_version(smi_output: str) -> str | None:
    """The CUDA version in ``nvidia-smi``'s banner (the driver's, not the toolkit's)."""
    match = re.search(r"CUDA Version:\s*([0-9.]+)", smi_output)
    return match.group(1) if match else None


def _gpu_info() -> dict:
    query = _run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,memory.total,pci.bus_id,driver_version",
            "--format=csv,noheader,nounits",
        ]
    )
    gpus = parse_gpus(query) if query else []
    banner = _run(["nvidia-smi"]) if query else None
    topo = _run(["nvidia-smi", "topo", "-m"]) if query else None
    return {
        "gpus": gpus,
        "driver": gpus[0]["driver"] if gpus else None,
        "cuda": parse_cuda_version(banner) if banner else None,
        "nvidia_smi_topo": topo.rstrip() if topo else None,
    }


_MPI_VERSIONS = (
    # "Open MPI v4.1.4, package: ..." (MPI_Get_library_version), "mpirun (Open MPI) 4.1.4"
    (re.compile(r"Open MPI\)?\s+v?(\d+(?:\.\d+)+)"), "Open MPI"),
    (re.compile(r"MPICH Version:\s*(\d+(?:\.\d+)+)"), "MPICH"),
    (re.compile(r"Intel\(R\) MPI Library[^\d]*(\d+(?:\.\d+)+)"), "Intel MPI"),
    (re.compile(r"HYDRA build details:.*?Version:\s*(\d+(?:\.\d+)+)", re.S), "MPICH"),
)


def mpi_version(text: str | None) -> str | None:
    """``"Open MPI 4.1.4"`` from any of the ways a library or its launcher says it, so one
    machine reads as one environment whichever probe a run used; else the first line."""
    if not text:
        return None
    text = str(text).replace("\x00", "")
    for pattern, name in _MPI_VERSIONS:
        match = pattern.search(text)
        if match:
            return f"{name} {match.group(1)}"
    return text.strip().splitlines()[0] if text.strip() else None


def _mpi_library(world) -> str | None:
    version = world.library_version() if world is not None else None
    return mpi_version(version or _run(["mpirun", "--version"]))


_LAUNCHERS = {"mpirun", "mpiexec", "orterun", "prterun", "srun", "mpiexec.hydra", "aprun"}


def _process(pid: int) -> tuple[list[str], int] | None:
    """(argv, parent pid) of a process, from /proc."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    parent = int(stat.rsplit(")", 1)[1].split()[1])
    return [a.decode(errors="replace") for a in argv if a], parent


def launch_command(command: list[str]) -> list[str]:
    """The command as the user typed it: under an MPI launcher, the launcher's own command
    line (``mpirun --oversubscribe -n 4 python -m ring.bench ...``), found among this
    process's ancestors; otherwise ``command``."""
    pid = os.getppid()
    for _ in range(8):
        found = _process(pid) if pid > 1 else None
        if found is None:
            break
        argv, parent = found
        if argv and os.path.basename(argv[0]) in _LAUNCHERS:
            return argv
        pid = parent
    return list(command)


def _shared_directory() -> str | None:
    """Where ``MpiRing.shared_buffer`` makes its parts (None if ``RING_SHM_DIR`` is bad)."""
    from ..mpi.shared import shared_directory

    try:
        return shared_directory()
    except ValueError:
        return None


def collect_environment(world=None) -> dict:
    return {
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_bytes": memory_bytes(),
        # What sizes ring-segmented's default block and the cpu backend's tiles.
        "cache_bytes": dict(zip(("l2", "last_level"), cache_bytes(), strict=True)),
        # Huge pages for NumPy's arrays, /dev/shm, and the MPI shared buffers' directory.
        "huge_pages": huge_pages(_shared_directory()),
        # Whether the calls pushed NVTX ranges: only with a tool attached (ring.nvtx).
        "nvtx_ranges": nvtx.AVAILABLE,
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": sys.executable,
        "packages": _packages(),
        **_gpu_info(),
        "mpi_library": _mpi_library(world),
        "mpi_world_size": getattr(world, "size", 1),
        "mpi_hosts": getattr(world, "hosts", 1),
    }
