"""The suite's own configuration: a hang guard per test, strict markers, and the shared
helpers on the ``pythonpath`` option (no ``sys.path`` edit in a conftest)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

DEADLOCK = textwrap.dedent(
    """
    import threading

    def test_deadlocked_thread():
        never = threading.Event()
        worker = threading.Thread(target=never.wait, daemon=True)
        worker.start()
        worker.join()

    def test_after_the_hang():
        pass
    """
)

UNKNOWN_MARKER = textwrap.dedent(
    """
    import pytest

    @pytest.mark.gpuu
    def test_typo():
        pass
    """
)


def _pytest(tmp_path: Path, source: str, *options: str) -> subprocess.CompletedProcess:
    """Runs ``source`` under this project's pytest configuration."""
    (tmp_path / "test_probe.py").write_text(source)
    command = [sys.executable, "-m", "pytest", "-c", ROOT / "pyproject.toml", "--rootdir", tmp_path]
    command += ["-p", "no:cacheprovider", *options, tmp_path / "test_probe.py"]
    return subprocess.run(
        [str(c) for c in command], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def test_every_test_has_a_default_time_limit(pytestconfig):
    assert float(pytestconfig.getini("timeout")) > 0


@pytest.mark.slow
def test_a_deadlocked_test_fails_and_the_run_goes_on(tmp_path):
    # The project's default limit, shortened so the probe ends quickly.
    done = _pytest(tmp_path, DEADLOCK, "-o", "timeout=2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Timeout" in done.stdout
    assert "1 failed, 1 passed" in done.stdout


def test_an_unregistered_marker_is_an_error(tmp_path):
    done = _pytest(tmp_path, UNKNOWN_MARKER)
    assert done.returncode != 0
    assert "'gpuu' not found in `markers`" in done.stdout + done.stderr


def test_shared_helpers_come_from_the_pythonpath_option(pytestconfig):
    assert Path(__file__).parent in [Path(p) for p in pytestconfig.getini("pythonpath")]
    # conftest.py holds shared fixtures; the helpers' import path is not its business.
    conftest = Path(__file__).parent / "conftest.py"
    assert "sys.path" not in conftest.read_text()
    import reference

    assert Path(reference.__file__).parent == Path(__file__).parent
