"""ring/ type-checks clean under the [tool.mypy] section of pyproject.toml."""

import subprocess
import sys
from pathlib import Path

import pytest

# Slow (tests/tiers.py): mypy over ring/.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_error():
    mypy = Path(sys.executable).parent / "mypy"
    if not mypy.exists():
        pytest.skip("mypy is not installed (pip install '.[test]')")
    done = subprocess.run([str(mypy)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout
