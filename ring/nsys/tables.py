"""``nsys stats`` CSV files -> tidy table files, and reading them back.

:mod:`ring.nsys.stats_csv` parses each report file, :mod:`ring.nsys.stats_tables` turns
the reports into the tables of ``COLUMNS`` and :mod:`ring.nsys.gputrace` adds the GPU
trace's; this module writes them as ``<table>.csv`` and reads them back.
"""

from __future__ import annotations

import csv
import io
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from ..bench.results import write_text_atomic
from .gputrace import GPU_COLUMNS, build_gpu_tables, read_projection, read_trace, trace_report
from .stats_csv import NsysCsvError, Report, read_report
from .stats_tables import COLUMNS, build_tables

__all__ = [
    "COLUMNS",
    "NsysCsvError",
    "Report",
    "build_tables",
    "read_report",
    "read_tables",
    "write_tables",
]


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_tables(csvs: Sequence[str | os.PathLike], out_dir: str | os.PathLike) -> dict[str, Path]:
    """Parse ``csvs`` and write ``out_dir/<table>.csv`` for every table that has rows.

    Tables of this module's names that a previous run left and that have no rows now are
    removed, so a directory never mixes two runs.  Returns table name -> file written.
    """
    if not csvs:
        raise ValueError("no nsys stats CSV files given")
    traces: dict[str, dict[str, Path]] = defaultdict(dict)
    summaries = []
    for path in map(Path, csvs):
        found = trace_report(path)
        if found is None:
            summaries.append(path)
        else:
            traces[found[0]][found[1]] = path
    tables = build_tables([read_report(path) for path in summaries])
    for name in GPU_COLUMNS:
        tables.setdefault(name, [])
    for profile, files in sorted(traces.items()):
        ops = read_trace(files["cuda_gpu_trace"]) if "cuda_gpu_trace" in files else []
        proj = files.get("nvtx_gpu_proj_trace")
        gpu = build_gpu_tables(profile, ops, read_projection(proj) if proj else [])
        for name, rows in gpu.items():
            tables[name].extend(rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, columns in COLUMNS.items():
        path = out / f"{name}.csv"
        if not tables[name]:
            path.unlink(missing_ok=True)
            continue
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(columns)
        for row in tables[name]:
            writer.writerow([_cell(row.get(column)) for column in columns])
        write_text_atomic(path, text.getvalue())  # whole, or the old table
        written[name] = path
    return written


_INT_COLUMNS = {"step", "node", "rank", "count", "calls", "nodes", "ops", "kernels", "copies",
                "transfers"}  # fmt: skip


def read_tables(tables_dir: str | os.PathLike) -> dict[str, list[dict]]:
    """Read back what :func:`write_tables` wrote (missing tables are empty lists)."""
    folder = Path(tables_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"no tables directory at {folder}")
    tables: dict[str, list[dict]] = {}
    text_columns = {"profile", "range", "domain", "kind", "phase", "style", "operation",
                    "name", "grid_xyz", "block_xyz", "function", "device", "stream"}  # fmt: skip
    for name, columns in COLUMNS.items():
        path = folder / f"{name}.csv"
        tables[name] = []
        if not path.is_file():
            continue
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            if reader.fieldnames != columns:
                raise NsysCsvError(
                    f"{path}: columns {reader.fieldnames} are not those of table {name} ({columns})"
                )
            for raw in reader:
                row = {}
                for column, value in raw.items():
                    if column in text_columns:
                        row[column] = value
                    elif column == "sync_wait":
                        row[column] = value == "true"
                    elif value == "":
                        row[column] = "" if column in ("step", "node", "rank") else None
                    elif column in _INT_COLUMNS:
                        row[column] = int(value)
                    else:
                        number = float(value)
                        row[column] = int(number) if number.is_integer() else number
                tables[name].append(row)
    return tables
