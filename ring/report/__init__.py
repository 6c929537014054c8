"""Figures and the generated report of the study, built from the result files of one run.

Entry points (used by the workflow's report rule and by ``python -m ring.report``):

* :func:`build_report` — load the named inputs, draw the figures, write ``index.html``
  (self-contained) and ``report.md``;
* :func:`collect_inputs` — named inputs plus those found under a ``results/`` folder;
* :func:`load_inputs`, :class:`ReportModel`, :func:`build_figures` — the steps one by one;
* :data:`FIGURES` — every figure's name, question and caption.

Only pandas is imported with this package; matplotlib, seaborn and jinja2 load when a
figure or the report is built.
"""

from .build import BuildResult, build_figures, build_report, collect_inputs
from .figures import FIGURES, Figure, FigureSpec
from .inputs import ReportInputError, discover, load_inputs
from .model import ReportModel

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
