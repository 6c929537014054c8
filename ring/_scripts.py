"""The console scripts (``ring-bench``, ``ring-nsys``, ``ring-report``): each
imports its tool on call, so that a tool whose extra is not installed says which in one line
(``pip install 'ring-allreduce-study[report]'``) instead of ending in a traceback."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from ._optional import EXTRAS

# The package a missing import comes from -> the extra that brings it (see pyproject.toml).
SCRIPT_EXTRAS = {
    **EXTRAS,
    "nvtx": "nvtx",
    **dict.fromkeys(
        ("pandas", "matplotlib", "seaborn", "jinja2", "yaml", "scipy", "markdown_it"), "report"
    ),
}


# The console script -> the module whose main() it runs: imported as the script starts, by
# name, so a tool whose extra is missing can be said in one line.  The study tools stand
# above this module, as they stand above the library (tests/test_library_boundary.py
# reads this table).
TOOLS = {
    "ring-bench": "ring.bench.__main__",
    "ring-nsys": "ring.nsys.__main__",
    "ring-report": "ring.report.cli",
}


def _run(script: str) -> Callable[[], None]:
    """The console script ``script``: its tool's ``main()`` (:data:`TOOLS`), whose return
    value is the process's exit status (``ring-bench`` exits 1 on wrong results, 2 on bad
    input), as ``python -m`` gives it."""

    def main() -> None:
        try:
            tool = importlib.import_module(TOOLS[script])
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            extra = SCRIPT_EXTRAS.get(top)
            if extra is None:
                raise
            sys.exit(
                f"{script} needs the {extra} extra ({top} is not installed): "
                f"pip install 'ring-allreduce-study[{extra}]'"
            )
        sys.exit(tool.main())

    return main


bench = _run("ring-bench")
nsys = _run("ring-nsys")
report = _run("ring-report")
