"""The pre-commit hooks run the same checks as the suite, and they pass on the tree."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / ".pre-commit-config.yaml"
BIN = Path(sys.executable).parent


def _hooks() -> dict[str, dict]:
    config = yaml.safe_load(CONFIG.read_text())
    return {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}


def test_hooks_cover_the_checks_the_suite_makes():
    entries = {hook_id: hook["entry"] for hook_id, hook in _hooks().items()}
    assert entries == {
        "ruff-check": "ruff check",
        "ruff-format": "ruff format --check",
        "snakefmt": "snakefmt --check",
        "snakemake-lint": "snakemake --lint --cores 1",
        "mypy": "mypy",
    }
    # Offline and with the project's pinned tools: nothing is fetched from a hook repository.
    assert all(hook["language"] == "system" for hook in _hooks().values())


@pytest.mark.slow
def test_every_hook_passes_on_the_tree(tmp_path):
    pre_commit = BIN / "pre-commit"
    if not pre_commit.exists():
        pytest.skip("pre-commit is not installed (pip install '.[test]')")
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("pre-commit needs a git checkout")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PRE_COMMIT_HOME"] = str(tmp_path)
    done = subprocess.run(
        [str(pre_commit), "run", "--all-files", "--color", "never"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for hook in _hooks().values():
        assert f"{hook['name']}" in done.stdout
