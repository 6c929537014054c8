"""What the machine reports: its CPU model and the label its results and decision tables
carry (:func:`host_label`), how many GPUs a job started from here may use
(:func:`count_gpus`, the project's one GPU counter), its cache sizes, which size
ring-segmented's blocks and the CPU backend's tiles, and where it gives transparent huge
pages (recorded with every run: a streaming loop over files of /dev/shm on 4 KiB pages can
be slower than over NumPy's own arrays or files of a huge=always tmpfs)."""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

__all__ = [
    "DEFAULT_L2_BYTES",
    "DEFAULT_LAST_LEVEL_BYTES",
    "SYSFS_CACHE",
    "cache_bytes",
    "count_gpus",
    "cpu_model",
    "host_label",
    "huge_pages",
    "mount_huge",
    "probe_cache_bytes",
    "read_cache_sizes",
    "visible_gpus",
]

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
SYSFS_THP = Path("/sys/kernel/mm/transparent_hugepage")
# What a machine that reports nothing (no sysfs and no sysconf, e.g. macOS) is taken to
# have: a per-core L2 and a shared last level typical of a current server core.
DEFAULT_L2_BYTES = 1 << 20
DEFAULT_LAST_LEVEL_BYTES = 32 << 20
_SCALE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def read_cache_sizes(root: Path) -> dict[int, int]:
    """{level: bytes} of the data and unified caches listed under ``root`` (sysfs'
    ``cpu0/cache``: ``index*/{level,type,size}``); entries that cannot be read are skipped."""
    sizes: dict[int, int] = {}
    for index in sorted(root.glob("index*")) if root.is_dir() else ():
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        digits, unit = (size[:-1], size[-1]) if size[-1:] in _SCALE else (size, "")
        if kind == "Instruction" or not digits.isdigit():
            continue
        sizes[level] = int(digits) * _SCALE.get(unit, 1)
    return sizes


def probe_cache_bytes(root: Path = SYSFS_CACHE) -> tuple[int, int]:
    """(per-core L2, shared last-level) cache bytes: sysfs under ``root``, else
    ``os.sysconf``, else :data:`DEFAULT_L2_BYTES` and :data:`DEFAULT_LAST_LEVEL_BYTES`."""
    sizes = read_cache_sizes(root)
    names = {2: "SC_LEVEL2_CACHE_SIZE", 3: "SC_LEVEL3_CACHE_SIZE"}
    for level, name in names.items():
        if level not in sizes and name in os.sysconf_names:
            value = os.sysconf(name)
            if value > 0:
                sizes[level] = value
    l2 = sizes.get(2, DEFAULT_L2_BYTES)
    return l2, max(sizes.values(), default=DEFAULT_LAST_LEVEL_BYTES)


@lru_cache(maxsize=1)
def cache_bytes() -> tuple[int, int]:
    """:func:`probe_cache_bytes` of this machine, read once."""
    return probe_cache_bytes()


def _chosen(path: Path) -> str | None:
    """The bracketed word of a sysfs choice (``always [madvise] never``), None if unread."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def mount_huge(directory: str, mounts: str) -> str | None:
    """The ``huge=`` option of the tmpfs holding ``directory`` (an absolute path without
    links; ``never`` when the tmpfs names none), from ``mounts`` (``/proc/mounts``'s
    text); None if it is not a tmpfs."""
    best: tuple[int, str | None] = (-1, None)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = fields[1].replace("\\040", " ")
        inside = directory == point or directory.startswith(point.rstrip("/") + "/")
        # >=: of mounts stacked on one point, the last listed is the one in use.
        if inside and len(point) >= best[0]:
            huge = None
            if fields[2] == "tmpfs":
                options = dict(o.partition("=")[::2] for o in fields[3].split(","))
                huge = options.get("huge") or "never"
            best = (len(point), huge)
    return best[1]


def huge_pages(directory: str | None, root: Path = SYSFS_THP) -> dict:
    """Where the kernel gives transparent huge pages: to private memory (``madvise``:
    where asked, as NumPy does for large arrays), to its internal shared memory (shared
    anonymous mappings, memfd; ``shmem_enabled``), and to files on ``directory``'s tmpfs
    (its ``huge=`` option, whatever ``shmem_enabled`` says but ``deny`` and ``force``);
    None where unknown."""
    on_directory = None
    if directory is not None:
        try:
            mounts = Path("/proc/mounts").read_text()
            on_directory = mount_huge(os.path.realpath(directory), mounts)
        except OSError:
            pass
    return {
        "private": _chosen(root / "enabled"),
        "shared": _chosen(root / "shmem_enabled"),
        "directory": directory,
        "on_directory": on_directory,
    }


def cpu_model() -> str | None:
    """The processor's model name as the OS reports it, or None."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for key in ("model name", "Model name", "cpu model", "Hardware"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or None


def host_label(
    model: str | None = None, cores: int | str | None = None, gpus: tuple[str, ...] = ()
) -> str:
    """The label a machine's results and decision tables carry: its CPU model and cores
    (this machine's where not given), and its GPUs' names if any."""
    model = cpu_model() if model is None else model
    cores = os.cpu_count() if cores is None else cores
    label = f"{model}, {cores if cores is not None else '?'} cores"
    return label + (f", {'/'.join(sorted(set(gpus)))}" if gpus else "")


# -- GPUs: how many CUDA GPUs a job started from here may use, and how that was found out.
# Never raises and never initialises CUDA in this process: ``nvidia-smi -L`` lists the
# devices, and where there is no ``nvidia-smi`` CuPy may be asked in a child process (a
# broken driver can hang or crash the CUDA runtime).  ``nvidia-smi`` lists every device of
# the machine, so ``CUDA_VISIBLE_DEVICES`` then limits the count to what a job can see.

_CUPY_PROBE = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"


def count_gpus(*, ask_cupy: bool = False) -> tuple[int, str]:
    """(count, how it was found); a failed probe counts 0 GPUs and says why.

    ``ask_cupy``: without a usable ``nvidia-smi``, ask CuPy (in a child process)."""
    notes = []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        notes.append("nvidia-smi not found")
    else:
        try:
            done = subprocess.run(
                [smi, "-L"], capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            notes.append(f"nvidia-smi -L failed ({exc})")
        else:
            if done.returncode == 0:
                count = sum(line.startswith("GPU ") for line in done.stdout.splitlines())
                return visible_gpus(count, "nvidia-smi -L")
            notes.append(f"nvidia-smi -L exited {done.returncode}")
    if not ask_cupy:
        return 0, "; ".join(notes)
    return _ask_cupy(notes)


def _ask_cupy(notes: list[str]) -> tuple[int, str]:
    if importlib.util.find_spec("cupy") is None:
        notes.append("CuPy not installed")
        return 0, "; ".join(notes)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CUPY_PROBE],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        notes.append(f"CuPy probe failed ({exc})")
        return 0, "; ".join(notes)
    if done.returncode == 0 and done.stdout.strip().isdigit():
        # CuPy counts only the devices CUDA_VISIBLE_DEVICES lets it see.
        return int(done.stdout.strip()), "CuPy"
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    error = re.sub(r"^[\w.]+Error: ", "", last)
    notes.append(f"CuPy sees no device: {error}")
    return 0, "; ".join(notes)


def visible_gpus(count: int, how: str) -> tuple[int, str]:
    """``count`` devices listed, limited to those ``CUDA_VISIBLE_DEVICES`` names."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return count, how
    listed = [item for item in visible.split(",") if item.strip()]
    if len(listed) >= count:
        return count, how
    return len(listed), f"{how}, CUDA_VISIBLE_DEVICES={visible!r}"
