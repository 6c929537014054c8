"""Rows, the tidy CSV, the JSON beside it and the nccl-tests-style table on stdout.

Metrics (see DESIGN.md): ``algbw_GBps`` = S / t / 1e9; ``busbw_GBps`` = algbw·2(N-1)/N,
nccl-tests' allreduce factor, which is 0 for N = 1 (nothing crosses a link);
``traffic_GBps`` = the backend's schedule bytes / t / 1e9.  ``t`` is the median.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

__all__ = [
    "COLUMNS",
    "SCHEMA",
    "busbw_factor",
    "make_row",
    "read_csv",
    "write_csv_atomic",
    "write_json_atomic",
]

SCHEMA = 1

# The median and the spread of a point's timed calls, in every result CSV.
TIME_COLUMNS = ("time_us", "time_us_min", "time_us_p25", "time_us_p75", "time_us_max")

COLUMNS = (
    "backend",
    "sync",
    "nodes",
    "dtype",
    "op",
    "bytes",
    "count",
    "iters",
    *TIME_COLUMNS,
    "algbw_GBps",
    "busbw_GBps",
    "traffic_GBps",
    "wrong",
    "shared_devices",
)


def busbw_factor(nodes: int) -> float:
    """nccl-tests' allreduce bus factor 2(N-1)/N; 0 for one node."""
    return 2 * (nodes - 1) / nodes if nodes > 1 else 0.0


def make_row(
    *,
    backend: str,
    sync: str,
    nodes: int,
    dtype: np.dtype,
    op: str,
    nbytes: int,
    count: int,
    times_s: Sequence[float],
    traffic_bytes: int | None,
    wrong: int | None,
    shared_devices: bool,
    extras: dict | None = None,
) -> dict:
    times_us = np.asarray(times_s, dtype=np.float64) * 1e6
    lo, p25, median, p75, hi = np.percentile(times_us, [0, 25, 50, 75, 100])
    seconds = median / 1e6
    algbw = nbytes / seconds / 1e9 if seconds > 0 else None
    row = {
        "backend": backend,
        "sync": sync,
        "nodes": nodes,
        "dtype": np.dtype(dtype).name,
        "op": op,
        "bytes": nbytes,
        "count": count,
        "iters": len(times_us),
        "time_us": float(median),
        "time_us_min": float(lo),
        "time_us_p25": float(p25),
        "time_us_p75": float(p75),
        "time_us_max": float(hi),
        "algbw_GBps": algbw,
        "busbw_GBps": None if algbw is None else algbw * busbw_factor(nodes),
        "traffic_GBps": (
            traffic_bytes / seconds / 1e9 if traffic_bytes is not None and seconds > 0 else None
        ),
        "wrong": wrong,
        "shared_devices": bool(shared_devices),
    }
    row.update(extras or {})
    return row


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".6g")
    return str(value)


def columns_of(rows: Iterable[dict], first: Sequence[str] = COLUMNS) -> list[str]:
    """``first``, then any further keys in the order rows bring them."""
    names = dict.fromkeys(first)
    for row in rows:
        names.update(dict.fromkeys(row))
    return list(names)


def csv_text(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    columns = list(columns or columns_of(rows))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(name)) for name in columns])
    return buffer.getvalue()


def _write_atomic(path: Path, text: str) -> None:
    """Write beside ``path`` and rename over it: readers see the old file or the whole new
    one, and an interrupted write leaves nothing under ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes the file private (0600); results are for everyone to read.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv_atomic(path: Path, rows: Sequence[dict], columns: Sequence[str] | None = None):
    _write_atomic(path, csv_text(rows, columns))


def write_json_atomic(path: Path, document: dict) -> None:
    _write_atomic(path, json.dumps(document, indent=2, allow_nan=False) + "\n")


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


# -- stdout ------------------------------------------------------------------------------

TABLE_HEADER = (
    "#       size        count      type   redop      time    algbw    busbw  #wrong"
    "  traffic  spread\n"
    "#        (B)   (elements)                        (us)   (GB/s)   (GB/s)        "
    "   (GB/s)     (%)"
)


def _num(value, width: int, digits: int = 2) -> str:
    if value is None:
        return "N/A".rjust(width)
    return f"{value:{width}.{digits}f}"


def table_line(row: dict) -> str:
    """One size, in nccl-tests' column order; ``spread`` is (p75 - p25) / median."""
    spread = (
        100 * (row["time_us_p75"] - row["time_us_p25"]) / row["time_us"]
        if row["time_us"] > 0
        else None
    )
    wrong = "N/A" if row["wrong"] is None else str(row["wrong"])
    return (
        f"{row['bytes']:>12} {row['count']:>12} {row['dtype']:>9} {row['op']:>7} "
        f"{_num(row['time_us'], 9)} {_num(row['algbw_GBps'], 8)} "
        f"{_num(row['busbw_GBps'], 8)} {wrong:>7} {_num(row['traffic_GBps'], 8)} "
        f"{_num(spread, 7, 1)}"
    )
