"""One ``nsys stats`` CSV file, parsed, whatever the nsys generation.

Files are named as ``nsys stats --output PREFIX`` names them, ``PREFIX_<report>.csv``,
with report names of either generation (``nvtxsum`` or ``nvtx_sum`` ...), plus
``PREFIX_ring_waits.csv`` from :mod:`ring.nsys.waits`.  Columns are recognised by name,
not position: 2022's ``GridXYZ,BlockXYZ`` in the kernel summary, ``Style`` in the NVTX
summary, time units other than ns and size units other than MB are all read; a column
that is not recognised is an error that names the file and the columns found, because
guessing would silently mislabel numbers.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .names import REPORTS

__all__ = ["REPORT_FILES", "NsysCsvError", "Report", "read_report"]


class NsysCsvError(ValueError):
    """A CSV file that is not an ``nsys stats`` report this parser knows."""


# File report name -> logical report; both generations, plus the wait report.
REPORT_FILES: dict[str, str] = {
    name: logical for logical, names in REPORTS.items() for name in names
}
REPORT_FILES.update({"nvtxsesum": "nvtx_startend_sum", "nvtx_startend_sum": "nvtx_startend_sum"})
REPORT_FILES["ring_waits"] = "ring_waits"


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
    lines = _data_lines(path, report.notes)
    if not lines:
        return report
    reader = csv.reader(io.StringIO("\n".join(lines)))
    header = next(reader)
    fields = _header_fields(path, header, name, logical)
    text_fields = {"name", "style", "grid_xyz", "block_xyz", "function"}
    for number, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue
        if len(cells) != len(header):
            raise NsysCsvError(
                f"{path}: row {number} has {len(cells)} fields, the header {len(header)} "
                f"(a name with an unquoted comma?): {cells}"
            )
        row: dict[str, str | int | float | None] = {}
        for cell, (column, scale) in zip(cells, fields, strict=True):
            if column in text_fields:
                row[column] = " ".join(cell.split()) if column.endswith("_xyz") else cell
            else:
                row[column] = _number(cell, scale, path, column)
        report.rows.append(row)
    return report


def _data_lines(path: Path, notes: list[str]) -> list[str]:
    """The file's CSV lines: nsys' notes and progress lines left out (SKIPPED ones go to
    ``notes``); an nsys error or a file cut short is refused."""
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
                notes.append(line.strip())
            continue
        lines.append(line)
    return lines


def _header_fields(
    path: Path, header: list[str], name: str, logical: str
) -> list[tuple[str, float]]:
    """(output field, scale) per header cell; an unknown, missing or doubled one is refused."""
    found = [_field_for(cell, logical) for cell in header]
    unknown = [cell for cell, field_ in zip(header, found, strict=True) if field_ is None]
    fields = [field_ for field_ in found if field_ is not None]
    names = [column for column, _ in fields]
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
    return fields
