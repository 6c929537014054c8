"""The workflow's conda environments: exact conda-forge pins, nothing through pip, and pins
that satisfy the package's own requirements in pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
ENVS = sorted((ROOT / "envs").glob("*.yaml"))
EXACT = re.compile(r"^(?P<name>[a-z0-9][a-z0-9._-]*)=(?P<version>\d+(?:\.\d+)+)$")
# conda-forge names of packages that PyPI names differently.
PYPI_NAME = {"cupy": "cupy-cuda12x", "nccl": "nvidia-nccl-cu12"}


def _pyproject_requirements() -> dict[str, SpecifierSet]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        lines += extra
    specs: dict[str, SpecifierSet] = {"python": SpecifierSet(project["requires-python"])}
    for line in lines:
        requirement = Requirement(line)
        specs[requirement.name] = specs.get(requirement.name, SpecifierSet()) & (
            requirement.specifier
        )
    return specs


def _pins(env: Path) -> dict[str, str]:
    spec = yaml.safe_load(env.read_text())
    assert spec["channels"] == ["conda-forge", "nodefaults"], env.name
    pins = {}
    for dependency in spec["dependencies"]:
        assert isinstance(dependency, str), f"{env.name}: {dependency!r} (nothing through pip)"
        match = EXACT.match(dependency)
        assert match, f"{env.name}: {dependency!r} is not pinned to one version"
        pins[match["name"]] = match["version"]
    return pins


def test_there_are_environments():
    assert {e.stem for e in ENVS} == {"analysis", "cpu", "gpu", "mpi"}


@pytest.mark.parametrize("env", ENVS, ids=lambda e: e.stem)
def test_every_dependency_is_one_conda_forge_version(env):
    pins = _pins(env)
    assert "pip" not in pins
    assert "python" in pins


@pytest.mark.parametrize("env", ENVS, ids=lambda e: e.stem)
def test_pins_satisfy_the_package_requirements(env):
    specs = _pyproject_requirements()
    checked = 0
    for name, version in _pins(env).items():
        spec = specs.get(PYPI_NAME.get(name, name))
        if spec is not None:
            assert Version(version) in spec, f"{env.name}: {name}={version} outside {spec}"
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("name", ["cpu", "mpi", "gpu"])
def test_nvtx_comes_from_conda_forge_within_the_profiler_pin(name):
    pins = _pins(ROOT / "envs" / f"{name}.yaml")
    assert Version(pins["nvtx"]) in _pyproject_requirements()["nvtx"]


def test_missing_lock_files_are_explained():
    lockless = [e.stem for e in ENVS if not (e.parent / f"{e.stem}.linux-64.pin.txt").exists()]
    if lockless:
        assert "Lock files" in (ROOT / "envs" / "README.md").read_text()
