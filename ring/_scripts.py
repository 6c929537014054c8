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


def _run(script: str, module: str) -> Callable[[], None]:
    """The console script ``script``: ``module``'s ``main()``, whose return value is the
    process's exit status (``ring-bench`` exits 1 on wrong results, 2 on bad input), as
    ``python -m`` gives it."""

    def main() -> None:
        try:
            tool = importlib.import_module(module)
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


bench = _run("ring-bench", "ring.bench.__main__")
nsys = _run("ring-nsys", "ring.nsys.__main__")
report = _run("ring-report", "ring.report.__main__")
