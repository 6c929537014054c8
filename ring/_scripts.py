"""The console scripts (``ring-bench``, ``ring-nsys``, ``ring-report``): each
imports its tool on call, so that a tool whose extra is not installed says which in one line
(``pip install 'ring-allreduce-study[report]'``) instead of ending in a traceback."""

from __future__ import annotations

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


def _run(script: str, load: Callable[[], Callable[[], int]]) -> Callable[[], None]:
    """The console script ``script``: the ``main()`` that ``load`` imports, whose return
    value is the process's exit status (``ring-bench`` exits 1 on wrong results, 2 on bad
    input), as ``python -m`` gives it."""

    def main() -> None:
        try:
            tool = load()
        except ModuleNotFoundError as exc:
            top = (exc.name or "").split(".")[0]
            extra = SCRIPT_EXTRAS.get(top)
            if extra is None:
                raise
            sys.exit(
                f"{script} needs the {extra} extra ({top} is not installed): "
                f"pip install 'ring-allreduce-study[{extra}]'"
            )
        sys.exit(tool())

    return main


# Each tool imported where its script starts, by a plain import a reader (and the library
# boundary's test) can see: this module stands above the study tools, as they do above
# the library.
def _bench() -> Callable[[], int]:
    from .bench.__main__ import main

    return main


def _nsys() -> Callable[[], int]:
    from .nsys.__main__ import main

    return main


def _report() -> Callable[[], int]:
    from .report.__main__ import main

    return main


bench = _run("ring-bench", _bench)
nsys = _run("ring-nsys", _nsys)
report = _run("ring-report", _report)
