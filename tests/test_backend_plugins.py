"""Backends come from the ``ring.bench.backends`` entry points; ``RING_BENCH_PLUGINS``
only overrides them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ring.bench.backends import base as backends

PLUGIN = textwrap.dedent(
    """
    from ring.bench.backends import CpuBackend

    class Extra(CpuBackend):
        name = "test-extra"

    class Wrong(CpuBackend):
        name = "test-other-name"
    """
)

OVERRIDE = textwrap.dedent(
    """
    from ring.bench.backends import CpuBackend, register_backend

    @register_backend
    class Override(CpuBackend):
        name = "cpu"
        description = "overridden"
    """
)


def _distribution(root: Path, entry_points: str) -> None:
    (root / "ring_test_plugin.py").write_text(PLUGIN)
    (root / "ring_test_override.py").write_text(OVERRIDE)
    info = root / "ring_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ring-test-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ring.bench.backends]\n{entry_points}")


def _backends(root: Path, **env: str) -> subprocess.CompletedProcess:
    code = (
        "from ring.bench.backends import available_backends\n"
        "found = available_backends()\n"
        "print(','.join(sorted(found)))\n"
        "print(found['cpu'].description)\n"
    )
    environ = {k: v for k, v in os.environ.items() if k != "RING_BENCH_PLUGINS"}
    environ.update(PYTHONPATH=str(root), **env)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=environ, capture_output=True, text=True
    )


def test_installed_entry_point_adds_a_backend(tmp_path):
    _distribution(tmp_path, "test-extra = ring_test_plugin:Extra\n")
    result = _backends(tmp_path)
    assert result.returncode == 0, result.stderr
    names, description = result.stdout.splitlines()
    assert {"test-extra", "cpu", "mpi", "gpu", "nccl"} <= set(names.split(","))
    assert description != "overridden"


def test_entry_point_must_carry_the_backend_name(tmp_path):
    _distribution(tmp_path, "test-wrong = ring_test_plugin:Wrong\nbroken = no_such_module:X\n")
    result = _backends(tmp_path)
    assert result.returncode == 0, result.stderr
    names = result.stdout.splitlines()[0].split(",")
    assert "test-wrong" not in names and "test-other-name" not in names
    assert "the entry point must carry the backend's name" in result.stderr
    assert "broken = no_such_module:X failed to load" in result.stderr


def test_environment_variable_overrides_an_installed_backend(tmp_path):
    _distribution(tmp_path, "test-extra = ring_test_plugin:Extra\n")
    result = _backends(tmp_path, RING_BENCH_PLUGINS="ring_test_override")
    assert result.returncode == 0, result.stderr
    names, description = result.stdout.splitlines()
    assert description == "overridden"
    assert "test-extra" in names.split(",")


def test_own_backends_load_without_installed_entry_points(monkeypatch):
    # A checkout on PYTHONPATH, or an editable install made before the entry points.
    imported = []
    monkeypatch.setattr(backends.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(backends.importlib, "import_module", imported.append)
    monkeypatch.setattr(backends, "_plugins_loaded", False)
    monkeypatch.delenv("RING_BENCH_PLUGINS", raising=False)
    backends.available_backends()
    assert imported == [
        "ring.bench.backends.mpi_ring",
        "ring.bench.backends.gpu",
        "ring.bench.backends.nccl",
        "ring.bench.seed_cpp",
    ]
