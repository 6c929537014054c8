"""From the model to ``report.md`` and a self-contained ``index.html`` (Jinja2 templates)."""

from __future__ import annotations

import base64
import numbers
import os
import re
import struct
from datetime import UTC, datetime
from pathlib import Path

import numpy
import pandas as pd

from ..bench.environment import mpi_version
from . import profile_notes
from .figures import Figure
from .fmt import format_bytes, format_fraction, format_number, format_ratio
from .model import ReportModel
from .table import Table
from .trust_tables import alternated_table, beyond_llc, one_run_table, scaling_table

__all__ = ["Table", "context", "render"]

# Profile tables longer than this are cut in the report (the CSV keeps every row).
PROFILE_ROWS = 40
# The columns a reader needs; the CSV beside the report holds every column.
PROFILE_COLUMNS = {
    "nvtx_ranges": [
        "range", "count", "total_ns", "median_ns", "min_ns", "max_ns", "wait_ns", "wait_share",
    ],
    "memops": ["operation", "count", "total_ns", "median_ns", "total_bytes", "median_bytes"],
    "kernels": ["name", "grid_xyz", "block_xyz", "count", "total_ns", "median_ns"],
    "osrt": ["function", "sync_wait", "count", "total_ns", "median_ns", "max_ns"],
    "cuda_api": ["function", "count", "total_ns", "median_ns", "max_ns"],
    "waits": ["range", "function", "calls", "wait_ns"],
}  # fmt: skip


def _speedup_tables(model: ReportModel) -> list[Table]:
    tables = []
    # Speedup of A over B = time(B) / time(A): above 1× A is faster, below 1× B is.
    header = [
        "A",
        "B",
        "N",
        "largest speedup of A",
        "at",
        "smallest speedup of A",
        "at",
        "at the largest size",
    ]
    for comparison, summary in model.comparison_summaries:
        rows = []
        for r in summary.itertuples():
            nodes = (
                str(r.nodes_fast)
                if r.nodes_fast == r.nodes_slow
                else f"{r.nodes_fast} vs {r.nodes_slow}"
            )
            rows.append(
                [
                    r.fast,
                    r.slow,
                    nodes,
                    format_ratio(r.max_speedup),
                    format_bytes(r.max_at_bytes),
                    format_ratio(r.min_speedup),
                    format_bytes(r.min_at_bytes),
                    f"{format_ratio(r.speedup_at_largest)} ({format_bytes(r.largest_bytes)})",
                ]
            )
        note = "Speedup of A over B = time(B) / time(A): above 1× A is faster, below 1× B is."
        tables.append(Table(comparison.title, header, rows, note))
    return tables


def _busbw_table(model: ReportModel) -> Table:
    rows = [
        [
            r.series,
            str(r.nodes),
            format_bytes(r.bytes),
            format_number(r.time_us),
            format_number(r.algbw_GBps),
            format_number(r.busbw_GBps),
            format_number(r.traffic_GBps),
        ]
        for r in model.busbw_at_largest.itertuples()
    ]
    return Table(
        "Bandwidth at the largest size, per backend and N",
        ["series", "N", "size", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "traffic (GB/s)"],
        rows,
    )


def _ceiling_table(model: ReportModel) -> Table:
    rows = [
        [
            r.series,
            str(r.nodes),
            r.ceiling,
            format_number(r.ceiling_GBps),
            r.metric,
            format_bytes(r.largest_bytes),
            format_number(r.value_at_largest),
            format_fraction(r.fraction_at_largest),
            f"{format_fraction(r.max_fraction)} ({format_bytes(r.max_at_bytes)})",
            beyond_llc(r),
        ]
        for r in model.ceiling_fractions.itertuples()
    ]
    note = (
        "Each series against the ceilings measured in its own run: host backends against "
        "the fastest of the run's copy, add and triad kernels (STREAM-like, arrays of 4× the "
        "last-level cache, the better of the start and end measurements), GPU backends "
        "against device ones; link ceilings are compared with busbw, memory ceilings with "
        "the schedule's memory traffic, both counted as bytes crossing the memory bus. Only "
        "sizes of at least 4× the last-level cache compare with a memory ceiling: below it "
        "caches serve part of the traffic."
    )
    if not rows:
        note = "No run recorded a bandwidth ceiling that applies to its series."
    return Table(
        "Fraction of each ceiling reached",
        [
            "series",
            "N",
            "ceiling",
            "ceiling (GB/s)",
            "compared",
            "largest size",
            "value (GB/s)",
            "fraction",
            "highest fraction (at)",
            "highest at ≥ 4× LLC (at)",
        ],
        rows,
        note,
    )


_ENVIRONMENT_FIELDS = (
    ("host", lambda env, meta: env.get("host")),
    ("CPU", lambda env, meta: env.get("cpu_model")),
    ("cores", lambda env, meta: env.get("cores")),
    ("memory", lambda env, meta: _memory(env.get("memory_bytes"))),
    ("OS", lambda env, meta: env.get("os")),
    ("Python", lambda env, meta: env.get("python")),
    ("packages (all in the JSON)", lambda env, meta: _packages(env.get("packages"))),
    ("GPUs", lambda env, meta: _gpus(env.get("gpus"))),
    ("driver", lambda env, meta: env.get("driver")),
    ("CUDA", lambda env, meta: env.get("cuda")),
    ("MPI library", lambda env, meta: mpi_version(env.get("mpi_library"))),
    ("git commit", lambda env, meta: meta.get("git_commit")),
)


def _sources(model: ReportModel) -> list[tuple[str, dict]]:
    sources = [(run.name, run.meta) for run in model.inputs.runs]
    return sources + [(k.name, k.meta) for k in model.inputs.kernel_bandwidth]


def _environment_table(model: ReportModel) -> Table:
    """One column per distinct environment; runs that share one share a column."""
    columns: dict[tuple, list[str]] = {}
    topologies: dict[str, list[str]] = {}
    for name, meta in _sources(model):
        env = meta.get("environment") or {}
        values = tuple(
            # Strings reported by libraries may carry NUL padding (older Open MPI runs).
            "not recorded" if (v := get(env, meta)) in (None, "") else str(v).replace("\x00", "")
            for _, get in _ENVIRONMENT_FIELDS
        )
        columns.setdefault(values, []).append(name)
        if env.get("nvidia_smi_topo"):
            topologies.setdefault(str(env["nvidia_smi_topo"]), []).append(name)
    environments = list(columns.items())
    header = [""] + [
        "environment" if len(environments) == 1 else f"environment {i + 1}"
        for i in range(len(environments))
    ]
    rows = [["runs", *[", ".join(names) for _, names in environments]]]
    rows += [
        [label, *[values[i] for values, _ in environments]]
        for i, (label, _) in enumerate(_ENVIRONMENT_FIELDS)
    ]
    return Table(
        "Environment (from the JSON beside each result)",
        header,
        rows,
        preformatted=[
            (f"nvidia-smi topo -m ({', '.join(names)})", text) for text, names in topologies.items()
        ],
    )


def _memory(value) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    return f"{format_number(value / 2**30)} GiB"


# The packages whose versions change what the study measures; the JSON lists them all.
_MEASURED_PACKAGES = re.compile(r"^(numpy|cupy.*|mpi4py|nvtx|ring-allreduce-study)$", re.I)


def _packages(value) -> str | None:
    if not value:
        return None
    if isinstance(value, dict):
        shown = {k: v for k, v in value.items() if _MEASURED_PACKAGES.match(str(k))}
        return ", ".join(f"{name} {version}" for name, version in sorted(shown.items()))
    return str(value)


def _gpus(value) -> str:
    if not value:
        return "none"
    names = []
    for gpu in value:
        names.append(str(gpu.get("name", gpu)) if isinstance(gpu, dict) else str(gpu))
    return "; ".join(names)


def _command(value) -> str | None:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return value


def _profile_tables(model: ReportModel) -> list[Table]:
    tables = []
    for profile in model.inputs.profiles:
        for name, frame in profile.tables.items():
            # Every table of one profile has the same ``profile`` column: the title says it.
            frame = frame.drop(columns=["profile"], errors="ignore")
            shown_columns = [c for c in PROFILE_COLUMNS.get(name, frame.columns) if c in frame]
            frame = frame[shown_columns].copy()
            for column in frame.columns:
                values = frame[column]
                # Empty cells make a column of counts or indices float; show them whole.
                if values.dtype.kind == "f" and (values.dropna() % 1 == 0).all():
                    frame[column] = values.astype("Int64")
            shown = frame.head(PROFILE_ROWS)
            rows = [[_cell(v) for v in row] for row in shown.itertuples(index=False)]
            note = f"Columns a reader needs from {profile.path / 'tables' / (name + '.csv')}"
            if len(frame) > PROFILE_ROWS:
                note += f"; the first {PROFILE_ROWS} of its {len(frame)} rows"
            if profile.summary is not None:
                note += f"; derived figures in {profile.path / 'summary.md'}"
            tables.append(Table(f"{profile.name}: {name}", list(frame.columns), rows, note + "."))
    return tables


def _kernel_table(model: ReportModel) -> Table | None:
    summary = model.kernel_summary
    if summary.empty:
        return None
    rows = [
        [
            r.run,
            r.device,
            r.kernel,
            format_bytes(r.largest_bytes),
            format_number(r.kernel_GBps),
            format_number(r.copy_GBps),
            format_fraction(r.ratio_at_largest),
            f"{format_fraction(r.max_ratio)} ({format_bytes(r.max_at_bytes)})",
        ]
        for r in summary.itertuples()
    ]
    return Table(
        "Reduction kernel against the device copy (one GPU)",
        ["run", "device", "kernel", "largest size", "kernel (GB/s)", "copy (GB/s)", "kernel / copy",
         "highest kernel / copy (at)"],
        rows,
        "Kernel: two reads and one write per element (ring: ours, ring.gpu_kernels; ufunc: "
        "CuPy's); copy: one read and one write, of the same bytes on the same device in the "
        "same run.",
    )  # fmt: skip


def _wait_table(model: ReportModel) -> Table | None:
    waits = model.profile_waits
    if waits is None or waits.empty:
        return None
    rows = [
        [
            r.profile,
            r.phase,
            format_number(r.total_ns / 1e3),
            format_number(r.wait_ns / 1e3),
            format_fraction(r.wait_share),
        ]
        for r in waits.itertuples()
    ]
    return Table(
        "Share of ring-step time spent waiting (Nsight Systems)",
        ["profile", "phase", "time in steps (µs)", "blocked in sync calls (µs)", "share"],
        rows,
        "All step ranges of all nodes together; waiting is the time a step's thread spent "
        "blocked in synchronisation calls, read from the trace.",
    )


def _cell(value) -> str:
    if value is pd.NA:
        return ""
    if isinstance(value, bool | numpy.bool_):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        return "" if pd.isna(value) else format_number(float(value), 4)
    return str(value)


def _ceilings_text(model: ReportModel, run_name: str) -> str:
    ceilings = model.ceilings[model.ceilings["run"] == run_name]
    parts = [
        f"{r.ceiling} {'null' if pd.isna(r.GBps) else format_number(r.GBps)}"
        for r in ceilings.itertuples()
    ]
    return "; ".join(parts) or "none recorded"


def _kind(kind: str, machine: str) -> str:
    return f"{kind}, measured on {machine} (reference)" if machine else kind


def _inputs_table(model: ReportModel) -> Table:
    def result_row(result, kind: str, ceilings: str) -> list[str]:
        meta = result.meta
        return [
            result.name,
            _kind(kind, result.machine),
            str(result.csv_path),
            str(len(result.rows)),
            _command(meta.get("launch_command") or meta.get("command")) or "not recorded",
            f"{meta.get('start_time')} – {meta.get('end_time')}",
            ceilings,
        ]

    rows = [result_row(run, "sweep", _ceilings_text(model, run.name)) for run in model.inputs.runs]
    rows += [result_row(k, "kernel bandwidth", "") for k in model.inputs.kernel_bandwidth]
    for profile in model.inputs.profiles:
        row = profile_notes.inputs_row(profile)
        row[1] = _kind("profile", profile.machine)
        rows.append(row)
    return Table(
        "Inputs",
        ["name", "kind", "path", "rows / tables", "command", "measured (UTC)", "ceilings (GB/s)"],
        rows,
    )


def context(model: ReportModel, figures: list[Figure], out_dir: Path) -> dict:
    """Everything both templates show, already formatted."""
    drawn = [f for f in figures if f.drawn]
    starts = [run.meta.get("start_time") for run in model.inputs.runs if run.meta.get("start_time")]
    ends = [run.meta.get("end_time") for run in model.inputs.runs if run.meta.get("end_time")]
    scaling = scaling_table(model)
    one_run = one_run_table(model)
    alternated = alternated_table(model)
    headline = [
        *([one_run] if one_run is not None else []),
        *([alternated] if alternated is not None else []),
        *_speedup_tables(model),
        _busbw_table(model),
        _ceiling_table(model),
    ]
    if scaling is not None:
        headline.append(scaling)
    waiting = _wait_table(model)
    if waiting is not None:
        headline.append(waiting)
    kernel = _kernel_table(model)
    if kernel is not None:
        headline.append(kernel)
    return {
        "title": "Ring-allreduce study: results",
        "measured_from": min(starts) if starts else None,
        "measured_to": max(ends) if ends else None,
        "built": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commits": sorted({str(r.meta.get("git_commit")) for r in model.inputs.runs}),
        "findings": model.findings,
        "headline": headline,
        "gpu_speedup": _gpu_headline(model),
        "caveats": model.caveats,
        "figures": [
            {
                "name": f.spec.name,
                "question": f.spec.question,
                "caption": f.spec.caption,
                "b64": base64.b64encode(f.png.read_bytes()).decode("ascii"),
                "width": _png_size(f.png)[0],
                "height": _png_size(f.png)[1],
                "md_path": Path(os.path.relpath(f.png, out_dir)).as_posix(),
                "svg_path": Path(os.path.relpath(f.svg, out_dir)).as_posix(),
            }
            for f in drawn
        ],
        "missing_figures": [
            {"name": f.spec.name, "question": f.spec.question, "why": f.missing}
            for f in figures
            if not f.drawn
        ],
        "not_measured": model.not_measured,
        "profiles": _profile_tables(model),
        "environment": _environment_table(model),
        "inputs": _inputs_table(model),
    }


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header, so the page reserves the figure's space."""
    header = path.read_bytes()[:24]
    if header[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG file")
    return struct.unpack(">II", header[16:24])


def _gpu_headline(model: ReportModel) -> str | None:
    """The study's headline sentence: the largest GPU/CPU speedup and where."""
    comparison = model.comparison("gpu_vs_cpu")
    if comparison is None:
        return None
    table = comparison.table
    best = table.loc[table["speedup"].idxmax()]
    fast = model.rows[
        (model.rows["series"] == best["fast"])
        & (model.rows["nodes"] == best["nodes_fast"])
        & (model.rows["bytes"] == best["bytes"])
    ].iloc[0]
    slow = model.rows[
        (model.rows["series"] == best["slow"])
        & (model.rows["nodes"] == best["nodes_slow"])
        & (model.rows["bytes"] == best["bytes"])
        & (model.rows["run"] == best["run_slow"])
    ].iloc[0]
    where = ""
    if fast["run"] != slow["run"]:
        machines = [m or "this machine" for m in (fast.get("machine", ""), slow.get("machine", ""))]
        where = (
            f" Two runs on two machines ({machines[0]}; {machines[1]}): the ratio compares the "
            "machines as well as the implementations."
            if machines[0] != machines[1]
            else f" Two runs ({fast['run']}; {slow['run']}) on one machine."
        )
    return (
        f"Largest GPU/CPU speedup: {format_ratio(best['speedup'])} at "
        f"{format_bytes(int(best['bytes']))} per node ({best['fast']} N={best['nodes_fast']}: "
        f"{format_number(fast['time_us'])} µs; {best['slow']} N={best['nodes_slow']}: "
        f"{format_number(slow['time_us'])} µs).{where}"
    )


def _inline_html(text: str):
    """Escape ``text`` for HTML and turn its Markdown `code` and **bold** into tags."""
    from markupsafe import Markup, escape

    html = str(escape(text))
    html = re.sub(r"`([^`]+)`", r"<code>\1</code>", html)
    html = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", html)
    html = re.sub(r"(?<![\w*])\*([^*]+)\*(?![\w*])", r"<em>\1</em>", html)
    return Markup(html)


def render(model: ReportModel, figures: list[Figure], out_dir: str | Path) -> tuple[Path, Path]:
    """Write ``out_dir/report.md`` and ``out_dir/index.html``; return their paths."""
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
    # Both texts exist before either file is replaced: never one new and one old.
    texts = {
        name: env.get_template(template).render(**values)
        for template, name in (("report.md.j2", "report.md"), ("index.html.j2", "index.html"))
    }
    for name, text in texts.items():
        temporary = out_dir / f".{name}.tmp"
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(out_dir / name)
    return out_dir / "report.md", out_dir / "index.html"
