"""From the derived model to ``report.md`` and a self-contained ``index.html``, and their
appendix (Jinja2 templates).  Every text field reaches the HTML pages escaped: through
autoescaping, or through CommonMark with raw HTML off (:func:`_inline_html`)."""

from __future__ import annotations

import base64
import dataclasses
import functools
import os
import struct
from datetime import UTC, datetime
from pathlib import Path

from ..derive.model import ReportModel
from ..draw.specs import Figure
from ..words import tables
from ..words.caveats import caveats
from ..words.cost_model import cost_model_of
from ..words.findings import findings, unconfirmed
from ..words.hosts import hosts_section
from ..words.method import method
from ..words.profile import messages
from ..words.profile_notes import overhead_sentences, phase_sentences
from ..words.references import other_machines
from ..words.sources import commit_text, environment_table, inputs_table, profile_tables

__all__ = ["MAX_LINES", "context", "render"]

# The main report's length in Markdown lines: what a reader reads in five minutes.
MAX_LINES = 250
# The main report's nccl-tests tables: the plain rings at this N, one size in MAIN_STEP.
MAIN_NODES = 2
MAIN_STEP = 2


def _screened_without_confirmation(model: ReportModel) -> dict[tuple[str, int], str]:
    """Each kind and N a screen measured, with why no confirmation speaks for it."""
    found = {}
    for run in model.screens:
        first = run.rows.iloc[0]
        kind, nodes = str(first["backend"]), int(first["nodes"])
        over = model.rows[model.rows["run"] == run.name]["per_core"].max()
        found[(kind, nodes)] = (
            f"{over:g} workers per core in its screen: oversubscribed, so not confirmed"
            if over > 1
            else "its screen was not confirmed in separate launches (config `confirm: nodes`)"
        )
    return found


def _nccl(model: ReportModel) -> tuple[list[str], list[str]]:
    """The nccl-tests tables: the main report's (the plain rings at N = 2, one size in
    MAIN_STEP) and every one (the appendix)."""
    every = [tables.nccl_text(t) for t in model.nccl_tables]
    main = []
    for table in model.nccl_tables:
        plain = table.plain and table.backend in ("cpu", "mpi") and table.sync != "barrier"
        if table.out_of_place and table.nodes == MAIN_NODES and plain:
            short = dataclasses.replace(table, rows=table.rows.iloc[::MAIN_STEP])
            main.append(tables.nccl_text(short))
    return main, every


def _provenance(model: ReportModel) -> dict:
    runs = model.inputs.every_run()
    starts = [t for run in runs if (t := run.meta.get("start_time"))]
    ends = [t for run in runs if (t := run.meta.get("end_time"))]
    commits = sorted({commit_text(run.meta) for run in runs})
    return {
        "machine": model.machine,
        "measured_from": min(starts) if starts else "an unrecorded time",
        "measured_to": max(ends) if ends else "an unrecorded time",
        "commits": commits,
    }


def context(model: ReportModel, figures: list[Figure], out_dir: Path) -> dict:
    """Everything the templates show, already formatted."""
    nccl_main, nccl_every = _nccl(model)
    confirmations = model.confirmations
    return {
        "title": "Ring-allreduce study: results",
        "built": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **_provenance(model),
        "findings": findings(model.regimes),
        "unconfirmed": unconfirmed(confirmations, _screened_without_confirmation(model)),
        "confirmation_tables": [tables.confirmation_table(c) for c in confirmations],
        "launch_tables": [tables.launch_table(c) for c in confirmations],
        "method": method(confirmations),
        "caveats": caveats(model),
        "nccl_main": nccl_main,
        "main_nodes": MAIN_NODES,
        "nccl_every": nccl_every,
        "original": tables.original_table(model),
        "profile_messages": messages(model) + overhead_sentences(model) + phase_sentences(model),
        "screens": [tables.screen_table(run) for run in model.screens],
        "drift": tables.drift_table(model),
        "ceilings": tables.ceiling_table(model),
        "kernels": tables.kernel_table(model),
        "alternated": tables.alternated_table(model),
        "not_measured": model.not_measured,
        "not_measured_table": tables.not_measured_table(model),
        "figures": [_figure(f, out_dir) for f in figures if f.drawn],
        "missing_figures": [
            {"name": f.spec.name, "question": f.spec.question, "why": f.missing}
            for f in figures
            if not f.drawn
        ],
        "profiles": profile_tables(model),
        "environment": environment_table(model),
        "inputs": inputs_table(model),
        "cost_model": cost_model_of(model),
        "others": other_machines(model.inputs.references),
        "hosts": hosts_section(model.inputs.hosts),
    }


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
        loader=PackageLoader("ring.report.render", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html",), default_for_string=False),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["inline"] = _inline_html
    values = context(model, figures, out_dir)
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
