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
    # As in a checkout: ring/model/links.yaml is a link into config/, which the build copies in.
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "ring", src / "ring", symlinks=True, ignore=ignore)
    shutil.copytree(ROOT / "config", src / "config", symlinks=True)
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
    assert "ring/report/render/templates/index.html.j2" in names
    assert "ring/report/render/templates/report.md.j2" in names
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
    refused = subprocess.run(
        [venv / "bin" / "ring-bench", "--backend", "cpu", "--out", tmp_path / "no-suffix"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused  # bad input, as python -m ring.bench exits


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
    appendix = (tmp_path / "report" / "appendix.md").read_text()
    assert "<html" in html.lower()
    assert "# MPI_Allreduce (host buffers), N = 2" in appendix
    assert list((tmp_path / "figures").iterdir())


def test_wheel_carries_what_is_read_and_not_what_is_not(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "ring/model/links.yaml" in names  # python -m ring.model paper
    assert any(n.startswith("ring/model/defaults/") and n.endswith("model_fit.json") for n in names)
    # The per-call samples beside the default sweeps: nothing installed reads them.
    assert not [n for n in names if n.endswith(".samples.csv")]


def test_the_model_reads_its_links_from_the_wheel(venv, tmp_path):
    done = _run([venv / "bin" / "python", "-I", "-m", "ring.model", "paper"], tmp_path)
    assert "busbw" in done.stdout


def test_core_requirements_are_numpy_alone(wheel):
    (meta,) = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA")]
    text = zipfile.ZipFile(wheel).read(meta).decode()
    core = [
        line
        for line in text.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert core == ["Requires-Dist: numpy>=1.26"], core


@pytest.fixture(scope="module")
def core_venv(wheel, tmp_path_factory) -> Path:
    """The wheel over NumPy alone (`pip install .` with no extra), offline: a venv whose .pth
    line adds a folder holding a link to this environment's NumPy and nothing else."""
    import numpy

    tmp = tmp_path_factory.mktemp("core")
    env_dir = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", env_dir], tmp)
    python = env_dir / "bin" / "python"
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp)
    only_numpy = tmp / "numpy_only"
    only_numpy.mkdir()
    (only_numpy / "numpy").symlink_to(Path(numpy.__file__).parent)
    libs = Path(numpy.__file__).parent.parent / "numpy.libs"
    if libs.is_dir():
        (only_numpy / "numpy.libs").symlink_to(libs)
    (Path(purelib.stdout.strip()) / "zz_numpy.pth").write_text(f"{only_numpy}\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", python]
    _run([*pip, "install", "--no-deps", "--no-index", wheel], tmp)
    return env_dir


def test_a_core_install_runs_the_collectives(core_venv, tmp_path):
    code = (
        "import numpy as np, ring\n"
        "buffers = [np.ones(8, np.float32) * (i + 1) for i in range(3)]\n"
        "ring.allreduce(buffers, 'sum')\n"
        "print(float(buffers[0][0]))\n"
    )
    done = _run([core_venv / "bin" / "python", "-I", "-c", code], tmp_path)
    assert done.stdout.strip() == "6.0"


@pytest.mark.parametrize("command", [["ring-report"], ["python", "-m", "ring.report"]])
def test_a_tool_without_its_extra_names_it_in_one_line(core_venv, tmp_path, command):
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    done = subprocess.run(
        [core_venv / "bin" / command[0], *command[1:], "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "ring-report needs the report extra (pandas is not installed): "
        "pip install 'ring-allreduce-study[report]'"
    ], done.stderr


def test_the_study_extra_brings_what_snakemake_report_needs():
    """`snakemake --report` needs pygments: the study extra (what scripts/setup.sh installs)
    brings it through snakemake[reports], not the test extra alone."""
    import tomllib
    from importlib import metadata

    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    study = {Requirement(line).name: Requirement(line) for line in extras["study"]}
    assert "reports" in study["snakemake"].extras
    assert not any(Requirement(line).name == "pygments" for line in extras["test"])
    # ... and snakemake's [reports] extra is the one that carries pygments.
    carried = [r for r in metadata.requires("snakemake") or [] if r.startswith("pygments")]
    assert carried and 'extra == "reports"' in carried[0]
    # The report extra draws the report without the workflow.
    assert not any(Requirement(line).name == "snakemake" for line in extras["report"])
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert 'run) extras="mpi,study,slurm"' in setup
