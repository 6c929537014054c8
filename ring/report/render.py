"""From the model to ``report.md`` and a self-contained ``index.html`` (Jinja2 templates)."""

from __future__ import annotations

import base64
import functools
import os
import struct
from datetime import UTC, datetime
from pathlib import Path

from . import gate, regimes
from .cost_model import cost_model_of
from .figures import Figure
from .headline import gpu_headline, headline_tables
from .model import ReportModel
from .original import original_table
from .profile_message import messages
from .source_tables import environment_table, inputs_table, profile_tables
from .table import Table

__all__ = ["MAX_LINES", "Table", "context", "render"]

# The main report's length in Markdown lines: what a reader reads in five minutes.
MAX_LINES = 250


def context(model: ReportModel, figures: list[Figure], out_dir: Path) -> dict:
    """Everything both templates show, already formatted."""
    starts = [t for run in model.inputs.runs if (t := run.meta.get("start_time"))]
    ends = [t for run in model.inputs.runs if (t := run.meta.get("end_time"))]
    return {
        "title": "Ring-allreduce study: results",
        "measured_from": min(starts) if starts else None,
        "measured_to": max(ends) if ends else None,
        "built": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commits": sorted({str(r.meta.get("git_commit")) for r in model.inputs.runs}),
        "findings": model.findings,
        "main_findings": model.main_findings,
        "min_sizes": regimes.MIN_SIZES,
        "scope": regimes.scope(model),
        "profile_messages": messages(model),
        "gate_rules": gate.rules_text(),
        "gate_summary": gate.summary_table(model.gate),
        "gate_detail": gate.detail_table(model.gate),
        "original": original_table(model),
        "core": [
            t
            for t, shown in zip(
                regimes.core_tables(model, every_size=False), _main_keys(model), strict=True
            )
            if shown
        ],
        "core_left": [],
        "core_full": regimes.core_tables(model, every_size=True),
        "headline": headline_tables(model),
        "gpu_speedup": gpu_headline(model),
        "caveats": model.caveats,
        "figures": [_figure(f, out_dir) for f in figures if f.drawn],
        "missing_figures": [
            {"name": f.spec.name, "question": f.spec.question, "why": f.missing}
            for f in figures
            if not f.drawn
        ],
        "not_measured": model.not_measured,
        "profiles": profile_tables(model),
        "environment": environment_table(model),
        "inputs": inputs_table(model),
        "cost_model": cost_model_of(model),
    }


def _main_keys(model: ReportModel) -> list[bool]:
    """For each core table (in order): whether the main report shows it: a run of this
    machine with a point the quality gate let through (references from other machines,
    and tables the gate set aside whole, are in the appendix)."""
    points = model.regime_points
    passing = (points["gate"] == "").groupby([points[k] for k in regimes.KEY], sort=True).any()
    return [bool(ok) and not key[1] for key, ok in passing.items()]


def _figure(figure: Figure, out_dir: Path) -> dict:
    """A drawn figure as the templates show it: inline PNG (HTML), files beside (Markdown)."""
    png, svg = figure.png, figure.svg
    if png is None or svg is None:
        raise ValueError(f"figure {figure.spec.name} was not drawn")
    width, height = _png_size(png)
    return {
        "name": figure.spec.name,
        "question": figure.spec.question,
        "caption": figure.spec.caption,
        "b64": base64.b64encode(png.read_bytes()).decode("ascii"),
        "width": width,
        "height": height,
        "md_path": Path(os.path.relpath(png, out_dir)).as_posix(),
        "svg_path": Path(os.path.relpath(svg, out_dir)).as_posix(),
    }


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header, so the page reserves the figure's space."""
    header = path.read_bytes()[:24]
    if header[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG file")
    return struct.unpack(">II", header[16:24])


@functools.cache
def _commonmark():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False})  # raw HTML in a text is escaped


def _inline_html(text: str):
    """``text``'s inline Markdown (`code`, **bold**, *emphasis*) as HTML, the rest escaped:
    the sentences the Markdown report carries, in the HTML page (CommonMark, by
    markdown-it-py)."""
    from markupsafe import Markup

    return Markup(_commonmark().renderInline(text))


def render(model: ReportModel, figures: list[Figure], out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``out_dir/report.md`` and ``out_dir/index.html`` (what a reader reads first) and
    their appendix (``appendix.md``, ``appendix.html``: everything else); return the first
    two's paths."""
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = Environment(
        loader=PackageLoader("ring.report", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["inline"] = _inline_html
    values = context(model, figures, out_dir)
    # The main report keeps to MAX_LINES: core tables beyond it are left to the appendix,
    # last first (the page says which).
    while True:
        main = env.get_template("report.md.j2").render(**values)
        if len(main.splitlines()) <= MAX_LINES or not values["core"]:
            break
        values["core_left"].insert(0, values["core"].pop())
    # Every text exists before any file is replaced: never one new and one old.
    texts = {
        name: env.get_template(template).render(**values)
        for template, name in (
            ("report.md.j2", "report.md"),
            ("index.html.j2", "index.html"),
            ("appendix.md.j2", "appendix.md"),
            ("appendix.html.j2", "appendix.html"),
        )
    }
    for name, text in texts.items():
        temporary = out_dir / f".{name}.tmp"
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(out_dir / name)
    return out_dir / "report.md", out_dir / "index.html"
