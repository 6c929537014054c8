"""What the GPU did during each ring step, from the two trace reports of ``nsys stats``.

The summary reports say how long the *host* spent in each step's NVTX range; for the GPU
ring that is the time to enqueue a copy or a kernel, not the time the device worked.  Two
trace reports give the device's side:

* ``cuda_gpu_trace`` (2022: ``gputrace``): every kernel and memory operation with its
  start, duration, bytes, device and stream;
* ``nvtx_gpu_proj_trace`` (2022: ``nvtxgpuproj``): every NVTX range projected onto the
  GPU, i.e. from the start of the first to the end of the last GPU operation launched
  inside it, with the id of the enclosing range.

From them, per profile:

* ``gpu_steps``: per (phase, step, node), the device time of the step's operations (the
  projected duration) and the idle gap before them on that node (since the node's
  previous step ended on the device, or for a call's first step since the call's first
  operation started), medians and totals over calls;
* ``gpu_transfers``: memory copies started inside the calls' projected windows, by kind
  (device-to-device on shared devices, peer-to-peer between devices), per call and N:
  N(N−1) per phase that copies, so 4 for N = 2 and 24 for N = 4 with peer copies in both
  phases; restores between calls fall outside the windows;
* ``gpu_streams``: per device stream, operations, busy time and idle time inside the
  calls' windows.

Columns are found by name (units in the header, as ``(ns)`` or ``(MB)``); a file without
the columns this needs is an error naming it.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .names import TRACE_REPORTS, memop_kind, split_range

__all__ = ["GPU_COLUMNS", "build_gpu_tables", "read_projection", "read_trace"]

TRACE_FILES = {name: logical for logical, names in TRACE_REPORTS.items() for name in names}

GPU_COLUMNS: dict[str, list[str]] = {
    "gpu_steps": [
        "profile", "phase", "step", "node", "count", "device_median_ns", "device_total_ns",
        "gap_median_ns", "gap_total_ns", "ops",
    ],
    "gpu_transfers": ["profile", "nodes", "kind", "calls", "transfers", "per_call"],
    "gpu_streams": [
        "profile", "device", "stream", "ops", "kernels", "copies", "busy_ns", "idle_ns",
    ],
}  # fmt: skip

_SCALE = {"ns": 1, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9, "b": 1, "kb": 1e3, "mb": 1e6,
          "gb": 1e9, "kib": 1024, "mib": 1024**2, "gib": 1024**3}  # fmt: skip


class GpuTraceError(ValueError):
    """A trace CSV this module cannot read; the message names the file."""


def trace_report(path: Path) -> tuple[str, str] | None:
    """(profile prefix, logical report) when ``path`` is one of the two trace reports."""
    stem = path.name.removesuffix(".csv")
    for name, logical in TRACE_FILES.items():
        if stem.endswith("_" + name):
            return stem[: -len(name) - 1], logical
    return None


def _read(path: Path, wanted: dict[str, str]) -> list[dict]:
    """Rows with the ``wanted`` columns (output name -> header word), numbers scaled to ns
    or bytes by the header's unit."""
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    reader = csv.reader(lines)
    header = next(reader)
    where, scale = {}, {}
    for index, cell in enumerate(header):
        word, _, unit = cell.partition("(")
        word, unit = word.strip().lower(), unit.rstrip(")").strip().lower()
        for out, expected in wanted.items():
            if word == expected:
                where[out], scale[out] = index, _SCALE.get(unit, 1)
    missing = [wanted[k] for k in wanted if k not in where]
    if missing:
        raise GpuTraceError(f"{path}: no column {missing} (found {header})")
    rows = []
    for cells in reader:
        row: dict[str, float | str | None] = {}
        for out, index in where.items():
            value = cells[index].strip() if index < len(cells) else ""
            value = "" if value == "None" else value  # 2022.4 writes SQL NULL as None
            if out in _NUMERIC:
                try:
                    row[out] = float(value.replace(",", "")) * scale[out] if value else None
                except ValueError:
                    raise GpuTraceError(f"{path}: {value!r} in {header[index]!r}") from None
            else:
                row[out] = value
        rows.append(row)
    return rows


_NUMERIC = {"start", "duration", "bytes", "range_id", "parent_id", "ops"}


def read_trace(path: str | Path) -> list[dict]:
    """GPU operations: start, duration (ns), bytes, device, stream, name."""
    wanted = {"start": "start", "duration": "duration", "bytes": "bytes", "device": "device",
              "stream": "strm", "name": "name"}  # fmt: skip
    return _read(Path(path), wanted)


def read_projection(path: str | Path) -> list[dict]:
    """Projected NVTX ranges: name, start, duration (ns), range_id, parent_id."""
    wanted = {"name": "name", "start": "projected start", "duration": "projected duration",
              "range_id": "rangeid", "parent_id": "parentid", "ops": "numgpuops"}  # fmt: skip
    return _read(Path(path), wanted)


def _median(values: list[float]):
    return round(statistics.median(values)) if values else None


# A call's time on the host as (start, end, nodes); device work inside it belongs to it.
Window = tuple[float, float, int]


def _steps(profile: str, ranges: list[dict]) -> tuple[list[dict], list[Window]]:
    """The gpu_steps rows, and the calls as (start, end, nodes) windows."""

    calls: dict[float, dict] = {}
    steps: dict[float, list[dict]] = defaultdict(list)
    for r in ranges:
        if r["start"] is None or r["duration"] is None:
            continue
        part = split_range(r["name"])
        if part["kind"] == "call":
            calls[r["range_id"]] = r
        elif part["kind"] == "step":
            steps[r["parent_id"]].append({**r, **part})
    per_step: dict[tuple[str, int, int], dict[str, list[float]]] = defaultdict(
        lambda: {"device": [], "gap": [], "ops": []}
    )
    windows: list[Window] = []
    order = {"reduce_scatter": 0, "all_gather": 1}
    for call_id, mine in steps.items():
        call = calls.get(call_id)
        nodes = max(int(s["node"]) for s in mine) + 1
        if call is not None:
            windows.append((call["start"], call["start"] + call["duration"], nodes))
        by_node: dict[int, list[dict]] = defaultdict(list)
        for s in mine:
            by_node[s["node"]].append(s)
        for node_steps in by_node.values():
            node_steps.sort(key=lambda s: (order.get(s["phase"], 2), int(s["step"])))
            previous_end = call["start"] if call is not None else None
            for s in node_steps:
                key = (s["phase"], int(s["step"]), int(s["node"]))
                per_step[key]["device"].append(s["duration"])
                per_step[key]["ops"].append(s["ops"] or 0)
                if previous_end is not None:
                    per_step[key]["gap"].append(max(0.0, s["start"] - previous_end))
                previous_end = s["start"] + s["duration"]
    rows = []
    for (phase, step, node), got in sorted(
        per_step.items(), key=lambda item: (order.get(item[0][0], 2), item[0][1], item[0][2])
    ):
        rows.append(
            {
                "profile": profile, "phase": phase, "step": step, "node": node,
                "count": len(got["device"]), "device_median_ns": _median(got["device"]),
                "device_total_ns": round(sum(got["device"])),
                "gap_median_ns": _median(got["gap"]),
                "gap_total_ns": round(sum(got["gap"])) if got["gap"] else None,
                "ops": _median(got["ops"]),
            }
        )  # fmt: skip
    return rows, windows


def _inside(op: dict, windows: list[Window]) -> Window | None:
    for window in windows:
        if window[0] <= op["start"] < window[1]:
            return window
    return None


@dataclass
class _Stream:
    """One device stream's operations inside the calls; ``spans`` per call window
    (first start, last end)."""

    ops: int = 0
    kernels: int = 0
    copies: int = 0
    busy: float = 0.0
    spans: dict[Window, list[float]] = field(
        default_factory=lambda: defaultdict(lambda: [float("inf"), 0.0])
    )


def build_gpu_tables(profile: str, ops: list[dict], ranges: list[dict]) -> dict[str, list]:
    """The three tables of :data:`GPU_COLUMNS` for one profile (empty without data)."""

    steps, windows = _steps(profile, ranges)
    transfers: dict[tuple[int, str], int] = defaultdict(int)
    calls_by_n: dict[int, int] = defaultdict(int)
    for _, _, nodes in windows:
        calls_by_n[nodes] += 1
    streams: dict[tuple[str, str], _Stream] = defaultdict(_Stream)
    for op in ops:
        if op["start"] is None or op["duration"] is None:
            continue
        window = _inside(op, windows)
        if window is None:
            continue
        is_copy = op["name"].startswith("[CUDA memcpy")
        if is_copy:
            transfers[(window[2], memop_kind(op["name"]))] += 1
        stream = streams[(op["device"], op["stream"])]
        stream.ops += 1
        if is_copy:
            stream.copies += 1
        elif not op["name"].startswith("[CUDA mem"):  # a memset is neither
            stream.kernels += 1
        stream.busy += op["duration"]
        span = stream.spans[window]
        span[0], span[1] = min(span[0], op["start"]), max(span[1], op["start"] + op["duration"])
    transfer_rows = [
        {"profile": profile, "nodes": nodes, "kind": kind, "calls": calls_by_n[nodes],
         "transfers": count, "per_call": count / calls_by_n[nodes]}
        for (nodes, kind), count in sorted(transfers.items())
    ]  # fmt: skip
    return {
        "gpu_steps": steps,
        "gpu_transfers": transfer_rows,
        "gpu_streams": _stream_rows(profile, streams),
    }


def _stream_rows(profile: str, streams: dict[tuple[str, str], _Stream]) -> list[dict]:
    """Per stream: busy time, and idle time inside the calls' spans of it."""
    rows = []
    for (device, stream), got in sorted(streams.items()):
        span = sum(end - start for start, end in got.spans.values())
        rows.append(
            {"profile": profile, "device": device, "stream": stream, "ops": got.ops,
             "kernels": got.kernels, "copies": got.copies, "busy_ns": round(got.busy),
             "idle_ns": round(max(0.0, span - got.busy))}
        )  # fmt: skip
    return rows
