"""``nsys stats`` CSV files -> tidy tables, whatever the nsys generation.

Input files are named as ``nsys stats --output PREFIX`` names them,
``PREFIX_<report>.csv``, with report names of either generation (``nvtxsum`` or
``nvtx_sum`` ...) in any mix, plus ``PREFIX_ring_waits.csv`` from :mod:`ring.nsys.waits`.
Columns are recognised by name, not position: 2022's ``GridXYZ,BlockXYZ`` in the kernel
summary, ``Style`` in the NVTX summary, time units other than ns and size units other
than MB are all read; a column that is not recognised is an error that names the file and
the columns found, because guessing would silently mislabel numbers.

Output tables (lists of dicts with the columns in ``COLUMNS``) use lower_snake_case
names, times in nanoseconds and sizes in bytes; ``profile`` is the PREFIX's file name, so
tables from several profiles can be stacked.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import nvtx_ranges
from .gputrace import GPU_COLUMNS, build_gpu_tables, read_projection, read_trace, trace_report
from .tool import REPORTS
from .waits import is_sync_wait

__all__ = [
    "COLUMNS",
    "NsysCsvError",
    "Report",
    "build_tables",
    "memop_kind",
    "read_report",
    "read_tables",
    "split_range",
    "write_tables",
]


class NsysCsvError(ValueError):
    """A CSV file that is not an ``nsys stats`` report this parser knows."""


# File report name -> logical report; both generations, plus the wait report.
REPORT_FILES: dict[str, str] = {
    name: logical for logical, names in REPORTS.items() for name in names
}
REPORT_FILES.update({"nvtxsesum": "nvtx_startend_sum", "nvtx_startend_sum": "nvtx_startend_sum"})
REPORT_FILES["ring_waits"] = "ring_waits"

COLUMNS: dict[str, list[str]] = {
    "nvtx_ranges": [
        "profile", "range", "domain", "kind", "phase", "step", "node", "rank", "style",
        "count", "total_ns", "avg_ns", "median_ns", "min_ns", "max_ns", "stddev_ns",
        "wait_ns", "wait_share",
    ],
    "memops": [
        "profile", "operation", "kind", "count", "total_ns", "avg_ns", "median_ns",
        "min_ns", "max_ns", "stddev_ns", "total_bytes", "avg_bytes", "median_bytes",
        "min_bytes", "max_bytes",
    ],
    "kernels": [
        "profile", "name", "grid_xyz", "block_xyz", "count", "total_ns", "avg_ns",
        "median_ns", "min_ns", "max_ns", "stddev_ns",
    ],
    "osrt": [
        "profile", "function", "sync_wait", "count", "total_ns", "avg_ns", "median_ns",
        "min_ns", "max_ns", "stddev_ns",
    ],
    "cuda_api": [
        "profile", "function", "count", "total_ns", "avg_ns", "median_ns", "min_ns",
        "max_ns", "stddev_ns",
    ],
    "waits": [
        "profile", "range", "phase", "step", "node", "rank", "function", "calls", "wait_ns",
    ],
    **GPU_COLUMNS,
}  # fmt: skip

_TIME_UNITS = {"ns": 1, "us": 1e3, "μs": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9}
_SIZE_UNITS = {
    "b": 1, "kb": 1e3, "kbi": 1024, "kib": 1024, "mb": 1e6, "mbi": 1024**2, "mib": 1024**2,
    "gb": 1e9, "gbi": 1024**3, "gib": 1024**3,
}  # fmt: skip
_STAT_WORDS = {
    "avg": "avg", "average": "avg", "mean": "avg", "med": "median", "median": "median",
    "min": "min", "minimum": "min", "max": "max", "maximum": "max", "stddev": "stddev",
    "std dev": "stddev",
}  # fmt: skip
_COUNT_WORDS = {"instances", "num calls", "count", "calls"}
_NAME_WORDS = {"range", "name", "operation"}
# Lines nsys prints around a report when its output is captured rather than written by
# --output: none of them is a CSV row.
_NOISE = re.compile(
    r"^\s*(SKIPPED:|Processing \[|Generating SQLite|Exporting |NOTICE:|Using .* for SQL|"
    r"It is assumed|Consider using|\*\* .*\(\w+\):\s*$|\[\d+/\d+\])"
)
_HEADER_CELL = re.compile(r"^(?P<word>.*?)\s*(?:\((?P<unit>[^()]*)\))?$")
_GROUPED_NUMBER = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")


@dataclass
class Report:
    """One ``nsys stats`` CSV file, parsed."""

    path: Path
    profile: str
    report: str  # the file's report name, e.g. "gpukernsum"
    logical: str  # the generation-free name, e.g. "cuda_gpu_kern_sum"
    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # SKIPPED / other nsys notes


def _identify(path: Path) -> tuple[str, str, str]:
    stem = path.name[: -len(".csv")] if path.name.endswith(".csv") else path.name
    for name in sorted(REPORT_FILES, key=len, reverse=True):
        if stem == name:
            return "", name, REPORT_FILES[name]
        if stem.endswith("_" + name):
            return stem[: -len(name) - 1], name, REPORT_FILES[name]
    known = ", ".join(sorted(REPORT_FILES))
    raise NsysCsvError(
        f"{path}: file name does not end in _<report>.csv with a known nsys stats report "
        f"(known: {known})"
    )


def _field_for(cell: str, logical: str) -> tuple[str, float] | None:
    """(output field, scale to ns or bytes) for one header cell of a report, or None."""
    match = _HEADER_CELL.match(cell.strip())
    word = (match.group("word") if match else cell).strip().lower()
    unit = (match.group("unit") or "").strip() if match else ""
    sizes = logical == "cuda_gpu_mem_size_sum"
    if logical == "ring_waits":
        fields = {"range": "name", "function": "function", "calls": "count"}
        if word in fields and not unit:
            return fields[word], 1
        if word == "wait time" and unit in ("", "ns"):
            return "wait_ns", 1
        return None
    if word in _NAME_WORDS and not unit:
        return "name", 1
    if word in _COUNT_WORDS and not unit:
        return "count", 1
    if word in ("time", "time(%)") and unit in ("%", ""):
        return ("time_pct", 1) if not sizes else None
    if word == "style" and not unit and logical.startswith("nvtx"):
        return "style", 1
    if word in ("gridxyz", "blockxyz") and not unit and logical == "cuda_gpu_kern_sum":
        return word.replace("xyz", "_xyz"), 1
    if sizes:
        scale = _SIZE_UNITS.get(unit.lower()) if unit else None
        if scale is None:
            return None
        if word in ("total", "total size"):
            return "total_bytes", scale
        if word in _STAT_WORDS:
            return f"{_STAT_WORDS[word]}_bytes", scale
        return None
    scale = _TIME_UNITS.get(unit) if unit else 1  # nsys before 2021 left out "(ns)"
    if scale is None:
        return None
    if word == "total time":
        return "total_ns", scale
    if word in _STAT_WORDS:
        return f"{_STAT_WORDS[word]}_ns", scale
    return None


_REQUIRED = {
    "cuda_gpu_mem_size_sum": ("name", "count", "total_bytes"),
    "ring_waits": ("name", "function", "count", "wait_ns"),
}


def _number(text: str, scale: float, path: Path, column: str):
    value = text.strip()
    if value == "":
        return None
    if _GROUPED_NUMBER.match(value):  # "1,234,567" from a formatter with separators
        value = value.replace(",", "")
    try:
        number = float(value) * scale
    except ValueError:
        raise NsysCsvError(f"{path}: column {column!r} holds {text!r}, not a number") from None
    if number.is_integer() and abs(number) < 2**63:
        return int(number)
    return number


def read_report(path: str | os.PathLike) -> Report:
    """Parse one ``PREFIX_<report>.csv`` file (0 bytes or only notes: no rows)."""
    path = Path(path)
    profile, name, logical = _identify(path)
    report = Report(path=path, profile=Path(profile).name, report=name, logical=logical)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise NsysCsvError(
            f"{path}: not a text CSV from nsys stats (byte {exc.start} is not UTF-8)"
        ) from None
    if text and not text.endswith("\n"):
        # nsys ends every row with a newline: without one the file was cut inside its last
        # row, whose name would silently turn into another range's.
        raise NsysCsvError(f"{path}: ends inside a row (the file was cut short); export it again")
    lines = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.lstrip().startswith("ERROR"):
            raise NsysCsvError(f"{path}: nsys reported an error instead of data: {line.strip()}")
        if _NOISE.match(line):
            if line.lstrip().startswith("SKIPPED"):
                report.notes.append(line.strip())
            continue
        lines.append(line)
    if not lines:
        return report
    reader = csv.reader(io.StringIO("\n".join(lines)))
    header = next(reader)
    fields = [_field_for(cell, logical) for cell in header]
    unknown = [cell for cell, found in zip(header, fields, strict=True) if found is None]
    names = [found[0] for found in fields if found is not None]
    required = _REQUIRED.get(logical, ("name", "count", "total_ns"))
    missing = [column for column in required if column not in names]
    if unknown or missing or len(set(names)) != len(names):
        problems = []
        if unknown:
            problems.append(f"unrecognised column(s) {unknown}")
        if missing:
            problems.append(f"missing {missing}")
        if len(set(names)) != len(names):
            problems.append("columns that mean the same thing twice")
        raise NsysCsvError(
            f"{path}: unknown header for nsys report {name!r} ({'; '.join(problems)}); "
            f"columns found: {header}"
        )
    text_fields = {"name", "style", "grid_xyz", "block_xyz", "function"}
    for number, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            raise NsysCsvError(
                f"{path}: row {number} has {len(cells)} fields, the header {len(header)} "
                f"(a name with an unquoted comma?): {cells}"
            )
        row = {}
        for cell, (column, scale) in zip(cells, fields, strict=True):
            if column in text_fields:
                row[column] = " ".join(cell.split()) if column.endswith("_xyz") else cell
            else:
                row[column] = _number(cell, scale, path, column)
        report.rows.append(row)
    return report


def split_range(name: str) -> dict:
    """Domain, kind and (phase, step, node, rank) of an NVTX range name.

    ``ring:reduce_scatter step 2 node 1`` is a step; ``ring:allreduce`` a call; anything
    else (another library's ranges, a bench's own) is ``other``.
    """
    domain, message = "", name
    head, sep, tail = name.partition(":")
    if sep and head and " " not in head:
        domain, message = head, tail
    parts = {"domain": domain, "kind": "other", "phase": "", "step": "", "node": "", "rank": ""}
    if domain != nvtx_ranges.DOMAIN:
        return parts
    if message in nvtx_ranges.COLLECTIVES:
        parts.update(kind="call", phase=message)
        return parts
    step = nvtx_ranges.STEP_RANGE.match(message)
    if step:
        parts.update(
            kind="step",
            phase=step["phase"],
            step=int(step["step"]),
            node=int(step["node"]),
            rank="" if step["rank"] is None else int(step["rank"]),
        )
    return parts


_MEMCPY = re.compile(r"^\[CUDA (?P<unified>Unified Memory )?memcpy (?P<what>[^\]]+)\]$")
_SHORT_KIND = {"H": "host", "D": "device", "A": "array", "P": "peer"}


def memop_kind(operation: str) -> str:
    """``[CUDA memcpy PtoP]`` and ``[CUDA memcpy Peer-to-Peer]`` -> ``peer_to_peer``."""
    operation = operation.strip()
    if operation == "[CUDA memset]":
        return "memset"
    match = _MEMCPY.match(operation)
    if not match:
        return "other"
    what = match["what"].strip()
    short = re.fullmatch(r"([HDAP])to([HDAP])", what)
    if short:
        kind = f"{_SHORT_KIND[short[1]]}_to_{_SHORT_KIND[short[2]]}"
    elif re.fullmatch(r"[A-Za-z]+(-to-[A-Za-z]+)+", what):
        kind = what.lower().replace("-", "_")
    else:
        return "other"
    return ("unified_" if match["unified"] else "") + kind


def _stats(row: dict, unit: str = "ns") -> dict:
    return {
        f"{stat}_{unit}": row.get(f"{stat}_{unit}")
        for stat in ("avg", "median", "min", "max", "stddev")
    }


def build_tables(reports: Iterable[Report]) -> dict[str, list[dict]]:
    """The tidy tables of :data:`COLUMNS` from parsed reports (empty lists when no data)."""
    by_profile: dict[str, dict[str, Report]] = defaultdict(dict)
    for report in reports:
        seen = by_profile[report.profile].get(report.logical)
        if seen is not None and seen.rows and report.rows:
            raise NsysCsvError(
                f"{seen.path} and {report.path} are the same report of profile "
                f"{report.profile!r}; pass one of them"
            )
        if seen is None or not seen.rows:
            by_profile[report.profile][report.logical] = report
    tables: dict[str, list[dict]] = {name: [] for name in COLUMNS}
    for profile in sorted(by_profile):
        got = by_profile[profile]

        def rows(logical: str, got=got) -> list[dict]:
            report = got.get(logical)
            return report.rows if report is not None else []

        waits_by_range: dict[str, int] = defaultdict(int)
        for row in rows("ring_waits"):
            waits_by_range[row["name"]] += row["wait_ns"]
            tables["waits"].append(
                {
                    "profile": profile,
                    "range": row["name"],
                    **{
                        k: v
                        for k, v in split_range(row["name"]).items()
                        if k not in ("domain", "kind")
                    },
                    "function": row["function"],
                    "calls": row["count"],
                    "wait_ns": row["wait_ns"],
                }
            )
        have_waits = "ring_waits" in got
        nvtx_rows = rows("nvtx_sum")
        if not nvtx_rows:  # 2022's pushpop and startend summaries add up to nvtx_sum
            nvtx_rows = [dict(r, style="PushPop") for r in rows("nvtx_pushpop_sum")]
            nvtx_rows += [dict(r, style="StartEnd") for r in rows("nvtx_startend_sum")]
        for row in nvtx_rows:
            wait = waits_by_range.get(row["name"], 0) if have_waits else None
            total = row["total_ns"]
            tables["nvtx_ranges"].append(
                {
                    "profile": profile,
                    "range": row["name"],
                    **split_range(row["name"]),
                    "style": row.get("style", ""),
                    "count": row["count"],
                    "total_ns": total,
                    **_stats(row),
                    "wait_ns": wait,
                    "wait_share": None if wait is None or not total else round(wait / total, 6),
                }
            )
        sizes = {row["name"]: row for row in rows("cuda_gpu_mem_size_sum")}
        timed = rows("cuda_gpu_mem_time_sum")
        for row in timed:
            size = sizes.get(row["name"], {})
            tables["memops"].append(
                {
                    "profile": profile,
                    "operation": row["name"],
                    "kind": memop_kind(row["name"]),
                    "count": row["count"],
                    "total_ns": row["total_ns"],
                    **_stats(row),
                    **_bytes(size),
                }
            )
        timed_names = {row["name"] for row in timed}
        for name, size in sizes.items():
            if name not in timed_names:
                tables["memops"].append(
                    {
                        "profile": profile,
                        "operation": name,
                        "kind": memop_kind(name),
                        "count": size["count"],
                        **_bytes(size),
                    }
                )
        for row in rows("cuda_gpu_kern_sum"):
            tables["kernels"].append(
                {
                    "profile": profile,
                    "name": row["name"],
                    "grid_xyz": row.get("grid_xyz", "").replace(" ", "x"),
                    "block_xyz": row.get("block_xyz", "").replace(" ", "x"),
                    "count": row["count"],
                    "total_ns": row["total_ns"],
                    **_stats(row),
                }
            )
        for row in rows("osrt_sum"):
            tables["osrt"].append(
                {
                    "profile": profile,
                    "function": row["name"],
                    "sync_wait": is_sync_wait(row["name"]),
                    "count": row["count"],
                    "total_ns": row["total_ns"],
                    **_stats(row),
                }
            )
        for row in rows("cuda_api_sum"):
            tables["cuda_api"].append(
                {
                    "profile": profile,
                    "function": row["name"],
                    "count": row["count"],
                    "total_ns": row["total_ns"],
                    **_stats(row),
                }
            )
    _sort(tables)
    return tables


def _bytes(size: dict) -> dict:
    def as_int(value):
        return None if value is None else round(value)

    return {
        "total_bytes": as_int(size.get("total_bytes")),
        **{f"{s}_bytes": as_int(size.get(f"{s}_bytes")) for s in ("avg", "median", "min", "max")},
    }


def _sort(tables: dict[str, list[dict]]) -> None:
    kinds = {"call": 0, "step": 1, "other": 2}
    phases = {"allreduce": 0, "reduce_scatter": 1, "all_gather": 2}

    def range_key(row):
        return (
            row["profile"],
            kinds[row["kind"]],
            phases.get(row["phase"], 3),
            row["step"] if row["step"] != "" else -1,
            row["node"] if row["node"] != "" else -1,
            row["rank"] if row["rank"] != "" else -1,
            row["range"],
        )

    tables["nvtx_ranges"].sort(key=range_key)
    tables["waits"].sort(
        key=lambda r: (
            range_key({**r, "kind": "step" if r["step"] != "" else "call"}),
            r["function"],
        )
    )
    for name in ("memops", "kernels", "osrt", "cuda_api"):
        tables[name].sort(key=lambda r: (r["profile"], -(r.get("total_ns") or 0)))


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
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(columns)
            for row in tables[name]:
                writer.writerow([_cell(row.get(column)) for column in columns])
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
