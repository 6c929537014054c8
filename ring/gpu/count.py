"""How many CUDA GPUs a job started from here may use, and how that was found out.

The one GPU counter of the project (the workflow's probes and the profiler's check use it).
It never raises and never initialises CUDA in this process: ``nvidia-smi -L`` lists the
devices, and where there is no ``nvidia-smi`` CuPy may be asked in a child process (a broken
driver can hang or crash the CUDA runtime).  ``nvidia-smi`` lists every device of the
machine, so ``CUDA_VISIBLE_DEVICES`` then limits the count to what a job can see.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

__all__ = ["count_gpus", "visible_gpus"]

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
