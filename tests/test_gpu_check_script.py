"""``scripts/gpu_check.sh`` on a machine without a GPU: its argument handling and the one
line it gives when what it needs is missing (the device run itself needs a GPU)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")


def check(tmp_path, *args, env=None):
    merged = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=merged, timeout=120
    )


def fake_cupy(folder: Path, devices: str) -> Path:
    """A ``cupy`` whose runtime reports ``devices`` (an int, or 'error' for no driver)."""
    package = folder / "cupy"
    (package / "cuda").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import cuda\n")
    (package / "cuda" / "__init__.py").write_text("from . import runtime\n")
    body = (
        "def getDeviceCount():\n    raise RuntimeError('cudaErrorNoDevice: no device')\n"
        if devices == "error"
        else f"def getDeviceCount():\n    return {devices}\n"
    )
    (package / "cuda" / "runtime.py").write_text(body)
    return folder


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_help_and_too_many_arguments(tmp_path):
    done = check(tmp_path, "--help")
    assert done.returncode == 0 and "scripts/gpu_check.sh [OUTDIR]" in done.stdout
    assert "--graphs" in done.stdout or "graphs off and on" in done.stdout
    done = check(tmp_path, "a", "b")
    assert done.returncode == 2 and "one argument at most" in done.stderr


@pytest.mark.parametrize(
    ("devices", "said"),
    [("error", "CuPy sees none (cudaErrorNoDevice"), ("0", "CuPy sees 0")],
)
def test_no_gpu_gives_one_clear_line_and_exit_2(tmp_path, devices, said):
    site = fake_cupy(tmp_path / "site", devices)
    done = check(tmp_path, str(tmp_path / "out"), env={"PYTHONPATH": str(site)})
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: MISSING: a CUDA device")
    assert said in lines[0]
    assert (tmp_path / "out" / "gpu_check.log").read_text().strip() == lines[0]
