"""Building figures and report in one call; what the workflow's report rule runs."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .alternation import load_alternated
from .figures import Figure, draw_figures
from .inputs import ReportInputError, load_inputs
from .model import ReportModel
from .render import render

__all__ = [
    "BuildResult",
    "ReportInputError",
    "build_figures",
    "build_report",
    "collect_inputs",
    "discover",
]


@dataclass(frozen=True)
class BuildResult:
    html: Path
    markdown: Path
    figures: list[Figure]
    seconds: float

    @property
    def appendix(self) -> Path:
        """``appendix.md`` beside ``report.md`` (``appendix.html`` beside ``index.html``)."""
        return self.markdown.parent / "appendix.md"

    @property
    def drawn(self) -> list[str]:
        return [f.spec.name for f in self.figures if f.drawn]

    @property
    def not_drawn(self) -> list[str]:
        return [f.spec.name for f in self.figures if not f.drawn]


def discover(results: str | Path) -> dict[str, list[Path]]:
    """The result files under a workflow's ``results/`` folder, by kind.

    ``results/{cpu,mpi,gpu}/*.csv`` are sweeps, except CSVs whose name says ``kernel``
    (the kernel-bandwidth sweep); ``results/profiles/*/`` with a ``tables/`` folder are
    profiles; ``results/report/not_measured.json`` is the workflow's record of what it left
    out.  Committed reference runs (``results/reference/``) are not picked up: they come from
    other machines, and join a report only when named
    (:func:`~ring.report.inputs.discover_reference`).
    """
    results = Path(results)
    if not results.is_dir():
        raise ReportInputError(f"{results}: no such results folder")
    sweeps: list[Path] = []
    kernel: list[Path] = []
    for kind in ("cpu", "mpi", "gpu"):
        for csv_path in sorted((results / kind).glob("*.csv")):
            if csv_path.name.endswith(".samples.csv"):
                continue  # the timed calls of the sweep beside it
            (kernel if "kernel" in csv_path.stem else sweeps).append(csv_path)
    profiles = sorted(p for p in (results / "profiles").glob("*") if (p / "tables").is_dir())
    record = results / "report" / "not_measured.json"
    alternated = sorted((results / "compare").glob("*.csv"))
    return {
        "alternated": alternated,
        "sweeps": sweeps,
        "kernel_bandwidth": kernel,
        "profiles": profiles,
        "not_measured": [record] if record.is_file() else [],
    }


def collect_inputs(
    sweeps=(),
    kernel_bandwidth=(),
    profiles=(),
    results: str | Path | None = None,
    not_measured: str | Path | None = None,
    references=(),
    alternated=(),
) -> dict[str, list[Path]]:
    """Named inputs plus, with ``results``, what :func:`discover` finds there (no repeats)."""
    chosen = {
        "references": [Path(p) for p in references],
        "sweeps": [Path(p) for p in sweeps],
        "kernel_bandwidth": [Path(p) for p in kernel_bandwidth],
        "profiles": [Path(p) for p in profiles],
        "not_measured": [] if not_measured is None else [Path(not_measured)],
        "alternated": [Path(p) for p in alternated],
    }
    if results is not None:
        for kind, paths in discover(results).items():
            if kind == "not_measured" and chosen[kind]:
                continue  # a record named explicitly wins over the one found
            known = {p.resolve() for p in chosen[kind]}
            chosen[kind] += [p for p in paths if p.resolve() not in known]
    return chosen


def build_figures(model: ReportModel, figures_dir: str | Path) -> list[Figure]:
    """Draw the figures into a scratch folder, then move them into ``figures_dir``.

    A failure while drawing leaves ``figures_dir`` as it was; figures the data no longer
    allow are removed from it.
    """
    figures_dir = Path(figures_dir)
    figures_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".figures-", dir=figures_dir) as scratch:
        drawn = draw_figures(model, scratch)
        placed = []
        for figure in drawn:
            for suffix in (".png", ".svg"):
                (figures_dir / f"{figure.spec.name}{suffix}").unlink(missing_ok=True)
            if figure.png is not None and figure.svg is not None:  # drawn
                png = figures_dir / figure.png.name
                svg = figures_dir / figure.svg.name
                shutil.move(figure.png, png)
                shutil.move(figure.svg, svg)
                figure = Figure(figure.spec, png=png, svg=svg)
            placed.append(figure)
    return placed


def build_report(
    sweeps,
    *,
    figures_dir: str | Path,
    out_dir: str | Path,
    kernel_bandwidth=(),
    profiles=(),
    not_measured: str | Path | None = None,
    references=(),
    alternated=(),
) -> BuildResult:
    """Load the inputs, draw the figures, write ``out_dir/index.html`` and ``report.md``
    (the findings first, at most 250 lines of Markdown) and their appendix
    (``appendix.html``, ``appendix.md``: everything else).

    ``sweeps`` are ``ring.bench`` CSVs (each with its JSON beside it), at least one;
    ``kernel_bandwidth`` the GPU kernel sweep CSVs; ``profiles`` ``results/profiles/<name>``
    folders; ``not_measured`` the workflow's ``not_measured.json`` (what it left out on this
    machine and why); ``references`` committed folders measured on other machines
    (``results/reference/<machine>``), drawn beside this run's results and labelled with
    the folder's name.  Every named input is required: a missing or malformed one raises
    :class:`ReportInputError` naming the file before anything is written.  What is not
    named is listed in the report as not measured.
    """
    started = time.perf_counter()
    inputs = load_inputs(
        list(sweeps), list(kernel_bandwidth), list(profiles), not_measured, list(references)
    )
    model = ReportModel(inputs, [load_alternated(p) for p in alternated])
    # Derive every table before drawing, so bad data fails before any file changes.
    _ = (model.caveats, model.not_measured, model.ceiling_fractions, model.scaling, model.gate)
    figures = build_figures(model, figures_dir)
    markdown, html = render(model, figures, out_dir)
    return BuildResult(html, markdown, figures, time.perf_counter() - started)
