"""Building figures and report in one call, stage by stage: load → derive → draw → render
(the words are formatted as the pages ask for them); what the workflow's report rule runs."""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .derive.model import ReportModel
from .draw.figures import draw_figures
from .draw.specs import Figure
from .load import ReportInputError, load_inputs
from .render.render import render

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


# What a workflow's results/ holds, by the input it is to the report.
INPUT_KINDS = (
    "runs",
    "confirmations",
    "fits",
    "kernel_bandwidth",
    "profiles",
    "alternated",
    "not_measured",
    "hosts",
)


def _is_launch_set(csv_path: Path) -> bool:
    import json

    try:
        meta = json.loads(csv_path.with_suffix(".json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("kind") == "launches"


def discover(results: str | Path) -> dict[str, list[Path]]:
    """The result files under a workflow's ``results/`` folder, by kind.

    ``results/{cpu,mpi,gpu}/*.csv`` are runs, or launch sets where their JSON says so,
    except CSVs whose name says ``kernel`` (the kernel-bandwidth sweep); ``model_fit.json``
    there are fits; ``results/profiles/*/`` with a ``tables/`` folder are profiles;
    ``results/compare/*.csv`` alternated launches; ``results/hosts/model_hosts.json`` the
    model across emulated hosts; ``results/report/not_measured.json`` the
    workflow's record of what it left out.  Committed reference runs
    (``results/reference/``) are not picked up: they come from other machines, and join a
    report only when named, in a section of their own.
    """
    results = Path(results)
    if not results.is_dir():
        raise ReportInputError(f"{results}: no such results folder")
    found: dict[str, list[Path]] = {kind: [] for kind in INPUT_KINDS}
    for kind in ("cpu", "mpi", "gpu"):
        for csv_path in sorted((results / kind).glob("*.csv")):
            if csv_path.name.endswith(".samples.csv"):
                continue  # the timed calls of the run beside it
            if "kernel" in csv_path.stem:
                found["kernel_bandwidth"].append(csv_path)
            elif _is_launch_set(csv_path):
                found["confirmations"].append(csv_path)
            else:
                found["runs"].append(csv_path)
        found["fits"] += sorted((results / kind).glob("model_fit.json"))
    found["profiles"] = sorted(
        p for p in (results / "profiles").glob("*") if (p / "tables").is_dir()
    )
    found["alternated"] = sorted((results / "compare").glob("*.csv"))
    found["hosts"] = sorted((results / "hosts").glob("model_hosts.json"))
    record = results / "report" / "not_measured.json"
    found["not_measured"] = [record] if record.is_file() else []
    return found


def collect_inputs(results: str | Path | None = None, **named) -> dict[str, list[Path]]:
    """Named inputs (by :data:`INPUT_KINDS`, plus ``references``) and, with ``results``,
    what :func:`discover` finds there that was not named."""
    chosen = {kind: [Path(p) for p in named.get(kind) or ()] for kind in INPUT_KINDS}
    chosen["references"] = [Path(p) for p in named.get("references") or ()]
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
    runs=(),
    *,
    figures_dir: str | Path,
    out_dir: str | Path,
    confirmations=(),
    fits=(),
    kernel_bandwidth=(),
    profiles=(),
    alternated=(),
    not_measured: str | Path | None = None,
    references=(),
    hosts=(),
) -> BuildResult:
    """Load the inputs, derive every table, draw the figures, write ``out_dir/index.html``
    and ``report.md`` (the findings first, at most 250 lines of Markdown) and their
    appendix (``appendix.html``, ``appendix.md``).

    ``runs`` are ``ring.bench`` CSVs (each with its JSON beside it); ``confirmations``
    launch sets of a screen's picks (their findings); ``fits`` the model fitted to this
    build's screens; ``hosts`` the model across emulated hosts (an appendix section);
    ``references`` committed folders of other machines
    (``results/reference/<machine>``), shown in a section of their own and nowhere else.
    Every named input is required: a missing or malformed one raises
    :class:`ReportInputError` naming the file before anything is written.
    """
    started = time.perf_counter()
    inputs = load_inputs(
        list(runs),
        confirmations=list(confirmations),
        fits=list(fits),
        kernel_bandwidth=list(kernel_bandwidth),
        profiles=list(profiles),
        alternated=list(alternated),
        not_measured=not_measured,
        references=list(references),
        hosts=list(hosts),
    )
    model = ReportModel(inputs)
    # Derive every table before drawing, so bad data fails before any file changes.
    _ = (model.confirmations, model.regimes, model.nccl_tables, model.not_measured)
    figures = build_figures(model, figures_dir)
    markdown, html = render(model, figures, out_dir)
    return BuildResult(html, markdown, figures, time.perf_counter() - started)
