"""Figures and the generated report of the study, built from the result files of one run.

Its stages, one sub-package each, each importing only those before it: ``load`` (the
result files, checked) → ``derive`` (every table and finding, computed once) → ``words``
(numbers in sentences and tables) → ``draw`` (the figures) → ``render`` (the pages).

Entry points (used by the workflow's report rule and by ``python -m ring.report``):

* :func:`build_report` — load the named inputs, draw the figures, write ``index.html``
  (self-contained) and ``report.md``, and their appendix;
* :func:`collect_inputs` — named inputs plus those found under a ``results/`` folder;
* :func:`load_inputs`, :class:`ReportModel`, :func:`build_figures` — the stages one by one;
* :data:`FIGURES` — every figure's name, question and caption.

Nothing heavy is imported with this package: pandas loads with the first of these names
used, matplotlib, seaborn and jinja2 when a figure or the report is built.
"""

import importlib

# Loaded on first use, so that importing the package costs nothing until a name is used.
_EXPORTS = {
    "BuildResult": ".build",
    "build_figures": ".build",
    "build_report": ".build",
    "collect_inputs": ".build",
    "FIGURES": ".draw.specs",
    "Figure": ".draw.specs",
    "FigureSpec": ".draw.specs",
    "ReportInputError": ".load",
    "discover": ".build",
    "load_inputs": ".load",
    "ReportModel": ".derive.model",
}

__all__ = [
    "FIGURES",
    "BuildResult",
    "Figure",
    "FigureSpec",
    "ReportInputError",
    "ReportModel",
    "build_figures",
    "build_report",
    "collect_inputs",
    "discover",
    "load_inputs",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
