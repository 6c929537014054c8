"""The quick tier (``pytest -m "not slow"``) holds no end-to-end run. Two checks, neither a
timing: tests/tiers.py's guard stops any test not marked slow that starts an end-to-end tool,
and here every test that reaches the workflow's Snakemake runners, and every module known to
run a tool end to end, is marked slow."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from tiers import QuickTierError, end_to_end_tool

TESTS = Path(__file__).resolve().parent
# workflow_helpers' functions that start Snakemake.
SNAKEMAKE_RUNNERS = {"snakemake", "dry_run"}
# Modules that run a tool end to end through their own code, not a shared helper.
END_TO_END_MODULES = {
    "test_packaging": "pip wheel, a venv",
    "test_types": "mypy",
    "test_workflow_e2e": "whole Snakemake runs",
    "test_nsys_e2e": "Nsight Systems",
    "test_report_browser": "headless Chromium",
    "test_mpi": "mpirun",
    "test_bench_mpi": "mpirun",
}
END_TO_END_TESTS = {"test_habits": ["test_every_hook_passes_on_the_tree"]}  # pre-commit


def _slow(module, test: str | None = None) -> bool:
    marks = getattr(module, "pytestmark", [])
    marks = list(marks) if isinstance(marks, list) else [marks]
    if test is not None:
        marks += getattr(getattr(module, test), "pytestmark", [])
    return any(mark.name == "slow" for mark in marks)


def _tests_reaching(source: str, targets: set[str]) -> list[str]:
    """The module's tests that call one of ``targets``, directly, through the module's own
    functions, or through a fixture of the module they take."""
    functions = {
        node.name: node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)
    }
    calls = {
        name: {
            call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
            for call in ast.walk(node)
            if isinstance(call, ast.Call)
        }
        | {arg.arg for arg in node.args.args}  # fixtures a function takes
        for name, node in functions.items()
    }
    reaching = set(targets)
    while grown := {n for n, called in calls.items() if called & reaching} - reaching:
        reaching |= grown
    return sorted(n for n in reaching & functions.keys() if n.startswith("test_"))


@pytest.mark.parametrize(
    ("argv", "tool"),
    [
        (["/venv/bin/snakemake", "-n", "all"], "snakemake"),
        ("snakemake --cores 1 --lint", "snakemake"),
        (["/venv/bin/mypy"], "mypy"),
        ([sys.executable, "-m", "mypy", "ring"], "mypy"),
        (["/venv/bin/pre-commit", "run", "--all-files"], "pre-commit"),
        ([sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "."], "pip wheel"),
        ([sys.executable, "-m", "pip", "install", "x.whl"], "pip install"),
        ([sys.executable, "-m", "venv", "--without-pip", "env"], "venv"),
        (["/bin/sh", "-c", "snakemake -n all"], "snakemake"),
        (["/bin/sh", "-c", "cd wf && snakemake -n"], "snakemake"),
        (["bash", "-c", "echo ok; mypy | tee log"], "mypy"),
        (["/bin/sh", "-c", "ls; echo snakemake"], None),
        ([sys.executable, "-m", "ring.bench", "--backend", "cpu"], None),
        ([sys.executable, "-m", "pip", "--version"], None),
        ([sys.executable, "-c", "import snakemake"], None),
        (["mpirun", "-n", "2", sys.executable, "-m", "ring.bench"], None),
        (["ruff", "check"], None),
        (b"/usr/bin/mypy", "mypy"),
        ([], None),
    ],
)
def test_end_to_end_tools_are_told_from_other_commands(argv, tool):
    assert end_to_end_tool(argv) == tool


def test_a_quick_test_that_starts_an_end_to_end_tool_fails_before_it_starts():
    with pytest.raises(QuickTierError, match="not marked slow"):
        subprocess.run([sys.executable, "-m", "mypy", "--version"], check=False)
    done = subprocess.run([sys.executable, "-c", "print('ok')"], capture_output=True, text=True)
    assert done.stdout == "ok\n"


@pytest.mark.slow
def test_a_slow_test_may_start_one():
    done = subprocess.run([sys.executable, "-m", "venv", "--help"], capture_output=True)
    assert done.returncode == 0


def test_the_reach_follows_helpers_and_fixtures():
    source = "\n".join(
        [
            "def plan(w): return dry_run(w, ['all'])",
            "def jobs(tmp_path): return plan(tmp_path)",
            "def test_via_helper(tmp_path): plan(tmp_path)",
            "def test_via_fixture(jobs): assert jobs",
            "def test_direct(w): snakemake(w, '-n')",
            "def test_unrelated(tmp_path): copy_workflow(tmp_path)",
        ]
    )
    assert _tests_reaching(source, SNAKEMAKE_RUNNERS) == [
        "test_direct",
        "test_via_fixture",
        "test_via_helper",
    ]


def test_every_test_that_runs_snakemake_is_marked_slow():
    unmarked = []
    for path in sorted(TESTS.glob("test_*.py")):
        tests = _tests_reaching(path.read_text(), SNAKEMAKE_RUNNERS)
        if tests:
            module = importlib.import_module(path.stem)
            unmarked += [f"{path.name}::{t}" for t in tests if not _slow(module, t)]
    assert not unmarked, f"these run Snakemake: mark them slow: {unmarked}"


@pytest.mark.parametrize("name", sorted(END_TO_END_MODULES))
def test_end_to_end_modules_are_slow_as_a_whole(name):
    assert _slow(importlib.import_module(name)), f"{name} runs {END_TO_END_MODULES[name]}"


@pytest.mark.parametrize(("name", "tests"), sorted(END_TO_END_TESTS.items()))
def test_end_to_end_tests_in_unit_modules_are_slow(name, tests):
    module = importlib.import_module(name)
    assert [t for t in tests if not _slow(module, t)] == []
