"""The tables that say where the numbers come from: environments, inputs, raw profiles."""

from __future__ import annotations

import numbers
import re

import numpy
import pandas as pd

from ...bench.environment import mpi_version
from ..derive.model import ReportModel
from . import profile_notes
from .fmt import format_number
from .table import Table

__all__ = ["commit_text", "environment_table", "inputs_table", "profile_tables"]

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
    sources = [(run.name, run.meta) for run in model.inputs.every_run()]
    return sources + [(k.name, k.meta) for k in model.inputs.kernel_bandwidth]


def environment_table(model: ReportModel) -> Table:
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


def profile_tables(model: ReportModel) -> list[Table]:
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


def commit_text(meta: dict) -> str:
    """A result's commit and whether the tree differed from it (``dirty``)."""
    commit = str(meta.get("git_commit") or "not recorded")[:12]
    dirty = meta.get("git_dirty")
    return commit + (" (dirty)" if dirty else "" if dirty is False else " (dirty: unknown)")


def inputs_table(model: ReportModel) -> Table:
    def result_row(result, kind: str, rows: int, ceilings: str) -> list[str]:
        meta = result.meta
        return [
            f"`{result.name}`",
            kind,
            str(result.csv_path),
            str(rows),
            _command(meta.get("launch_command") or meta.get("command")) or "not recorded",
            f"{meta.get('start_time')} – {meta.get('end_time')}",
            commit_text(meta),
            ceilings,
        ]

    rows = [
        result_row(run, "run", len(run.rows), _ceilings_text(model, run.name))
        for run in model.inputs.runs
    ]
    for launch_set in model.inputs.confirmations:
        kind = f"launch set ({len(launch_set.launches)} launches)"
        rows.append(result_row(launch_set, kind, len(launch_set.rows), "per launch: appendix"))
    rows += [
        result_row(k, "kernel bandwidth", len(k.rows), "") for k in model.inputs.kernel_bandwidth
    ]
    for profile in model.inputs.profiles:
        row = profile_notes.inputs_row(profile)
        row[1] = "profile"
        meta = profile_notes.bench_meta(profile) or {}
        rows.append([*row[:6], commit_text(meta), row[6]])
    return Table(
        "Inputs",
        [
            "name",
            "kind",
            "path",
            "rows / tables",
            "command",
            "measured (UTC)",
            "commit",
            "ceilings (GB/s)",
        ],
        rows,
    )
