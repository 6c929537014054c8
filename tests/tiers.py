"""The suite's two tiers. ``pytest -m "not slow"`` is the quick tier: unit tests, a couple of
minutes on two cores. ``pytest`` (what .ci/run runs) is the full suite: the quick tier plus
the tests marked ``slow``, the end-to-end ones among them (Snakemake runs of the workflow,
mypy, pre-commit, a wheel built and installed in a venv).

A test that starts one of those end-to-end tools must be marked slow: conftest.py makes any
other test that tries fail before the tool starts (see ``guard``), in either tier."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

# Executables and ``python -m`` modules that run the project end to end.
TOOLS = {"snakemake", "mypy", "pre-commit", "pre_commit"}
# ``python -m pip wheel|install`` builds or installs the package; ``-m venv`` makes a venv.
PIP_BUILDS = {"wheel", "install"}
SHELLS = {"sh", "bash", "dash"}


class QuickTierError(RuntimeError):
    """A test not marked slow started an end-to-end tool."""


def end_to_end_tool(argv: str | bytes | Sequence) -> str | None:
    """The end-to-end tool a command line starts (``"snakemake"``, ``"pip wheel"``...), or
    None. A shell's ``-c`` script is read command by command."""
    if isinstance(argv, bytes):
        argv = argv.decode(errors="replace")
    if isinstance(argv, str):
        try:
            words = shlex.split(argv)
        except ValueError:  # an unclosed quote: the shell will say so; read the words as such
            words = argv.split()
    else:
        words = [str(w) for w in argv]
    if not words:
        return None
    program = Path(words[0]).name
    if program in SHELLS and "-c" in words[:-1]:
        script = re.split(r"&&|\|\||[;|\n]", words[words.index("-c") + 1])
        return next(filter(None, map(end_to_end_tool, script)), None)
    if program in TOOLS:
        return program
    if "-m" not in words[:-1]:
        return None
    module, rest = words[words.index("-m") + 1], words[words.index("-m") + 2 :]
    if module in TOOLS:
        return module
    if module == "venv":
        return "venv"
    if module == "pip" and (build := PIP_BUILDS.intersection(rest)):
        return f"pip {min(build)}"
    return None


# The id of the running test when it is not marked slow; None between tests and for slow ones.
_quick_test: str | None = None


def _audit(event: str, args: tuple) -> None:
    if event != "subprocess.Popen" or _quick_test is None:
        return
    tool = end_to_end_tool(args[1] if args[1] is not None else args[0])
    if tool is not None:
        raise QuickTierError(
            f"{_quick_test} starts {tool} (end to end) but is not marked slow: "
            "add @pytest.mark.slow (or pytestmark = pytest.mark.slow for the module)"
        )


@contextmanager
def guard(item: pytest.Item) -> Iterator[None]:
    """While ``item`` runs (its fixtures' set-up included) and is not marked slow, starting
    an end-to-end tool raises QuickTierError."""
    global _quick_test
    _quick_test = None if item.get_closest_marker("slow") else item.nodeid
    try:
        yield
    finally:
        _quick_test = None


# Audit hooks cannot be removed: this module adds its one once per process.
sys.addaudithook(_audit)
