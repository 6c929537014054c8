"""The wheel as a user gets it: built offline, installed into a fresh venv outside the
checkout, it builds the report from the committed reference results."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "results" / "reference" / "amd-epyc-2core"
BACKENDS = {"cpu", "numpy-direct", "mpi-allreduce", "mpi", "gpu", "nccl", "seed-cpp"}

# Builds a wheel and a venv; the report runs in a subprocess.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _run(command, cwd, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    result = subprocess.run(
        [str(c) for c in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        **kwargs,
    )
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources so the checkout gets no build/."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "ring", src / "ring", ignore=shutil.ignore_patterns("__pycache__"))
    # The test extra pins setuptools>=77, so the build needs no index.
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp, src], tmp)
    (built,) = tmp.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel; the dependencies come from this test's environment
    through a .pth line, which adds the folder without running its editable-install hooks,
    so nothing of the checkout is importable there."""
    tmp = tmp_path_factory.mktemp("venv")
    env_dir = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", env_dir], tmp)
    python = env_dir / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp)
    deps = "\n".join(site.getsitepackages())
    (Path(purelib.stdout.strip()) / "zz_test_dependencies.pth").write_text(deps + "\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python]
    _run([*pip, "install", "--no-deps", "--no-index", wheel], tmp)
    return env_dir


def test_wheel_carries_templates_and_license(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "ring/report/templates/index.html.j2" in names
    assert "ring/report/templates/report.md.j2" in names
    assert "ring/bench/seed_cpp/seed_ring.cpp" in names  # compiled on first use
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names


def test_installed_wheel_is_imported_not_the_checkout(venv, tmp_path):
    python = venv / "bin" / "python"
    where = _run([python, "-I", "-c", "import ring; print(ring.__file__)"], tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv)


def test_installed_backends_come_from_entry_points(venv, tmp_path):
    code = (
        "from importlib import metadata\n"
        "eps = metadata.entry_points(group='ring.bench.backends')\n"
        "print(','.join(sorted(e.name for e in eps if e.dist.name == 'ring-allreduce-study')))\n"
        "from ring.bench.backends import available_backends\n"
        "print(','.join(sorted(available_backends())))\n"
    )
    declared, loaded = _run([venv / "bin" / "python", "-I", "-c", code], tmp_path).stdout.split()
    assert set(declared.split(",")) == BACKENDS
    assert set(loaded.split(",")) >= BACKENDS


def test_console_scripts_are_installed(venv, tmp_path):
    for script in ("ring-bench", "ring-nsys", "ring-report"):
        assert "usage:" in _run([venv / "bin" / script, "--help"], tmp_path).stdout


def test_installed_wheel_builds_the_reference_report(venv, tmp_path):
    result = _run(
        [
            venv / "bin" / "ring-report",
            "--sweep",
            REFERENCE / "cpu_sweep.csv",
            "--sweep",
            REFERENCE / "mpi_sweep.csv",
            "--figures",
            tmp_path / "figures",
            "--out",
            tmp_path / "report",
        ],
        tmp_path,
    )
    assert "wrote" in result.stdout
    html = (tmp_path / "report" / "index.html").read_text()
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "<html" in html.lower()
    assert "mpi-allreduce" in markdown
    assert list((tmp_path / "figures").iterdir())
