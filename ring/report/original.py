"""The original study's published figures beside what our runs measured.

The original study (a C++/CUDA ring, ``/work/shared/seeds/original-study-README.txt``)
published a handful of numbers; they are inputs here, each quoted from its README.  The GPU
bus bandwidths already live in ``config/links.yaml`` (the model's paper inputs) and are read
from there; the two wall-clock times are the README's own sentence.  Ours come from the run's
files, each labelled with the machine that measured it: the two never share a machine, so
the table sets them side by side and draws no ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .analysis import PLAIN
from .cost_model import links_file
from .fmt import format_bytes, format_number
from .gate import gated
from .table import Table

__all__ = ["Published", "original_table", "published"]

GiB = 1 << 30
README = "original study README"


@dataclass(frozen=True)
class Published:
    what: str
    backend: str
    nodes: int
    bytes: int
    machine: str
    time_ms: float | None
    busbw_GBps: float | None
    source: str


# "Max speedup: 29.3x (GPU vs. CPU wall-clock time at the 1 GiB buffer size — 11.3 ms vs.
# 331.7 ms)"; CPU: "e2-standard-8 VM (8 vCPU AMD EPYC 7B12 ...), N=4 threads"; GPU: "2x NVIDIA
# A100 SXM 80GB connected via NVLink ... N=2 physical devices".
_TIMES = (
    Published("CPU ring (std::thread, std::barrier)", "cpu", 4, GiB,
              "GCP e2-standard-8, 8 vCPU AMD EPYC 7B12", 331.7, None,
              f'{README}, "Benchmark results": "11.3 ms vs. 331.7 ms" at 1 GiB'),
    Published("GPU ring (cudaMemcpyPeerAsync + add kernel)", "gpu", 2, GiB,
              "2x A100 SXM 80GB, NVLink NV12", 11.3, None,
              f'{README}, "Benchmark results": "11.3 ms vs. 331.7 ms" at 1 GiB'),
)  # fmt: skip
_ORIGINAL_LINK = "the original study's own GPU ring"


def _from_links(path: Path) -> list[Published]:
    """The original study's GPU busbw entries of ``config/links.yaml`` (its ``published``)."""
    import yaml

    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8")).get("published") or []
    except (OSError, AttributeError, yaml.YAMLError):
        return []
    found = []
    for entry in entries:
        if not str(entry.get("what", "")).startswith(_ORIGINAL_LINK):
            continue
        machine = str(entry["what"]).split(", ")[1] if ", " in entry["what"] else "A100"
        found.append(
            Published(
                "GPU ring (cudaMemcpyPeerAsync + add kernel)",
                "gpu",
                int(entry["nodes"]),
                GiB,
                machine,
                None,
                float(entry["busbw_GBps"]),
                " ".join(str(entry.get("source", "")).split()),
            )
        )
    return found


def published(links: Path | None = None) -> list[Published]:
    """Every published figure, times first (the GPU N = 2 time and busbw on one row)."""
    rows = list(_TIMES)
    for entry in _from_links(links or links_file()):
        same = [
            i for i, r in enumerate(rows) if (r.backend, r.nodes) == (entry.backend, entry.nodes)
        ]
        if same:
            r = rows[same[0]]
            rows[same[0]] = Published(
                r.what, r.backend, r.nodes, r.bytes, r.machine, r.time_ms, entry.busbw_GBps,
                f"{r.source}; busbw: {entry.source}",
            )  # fmt: skip
        else:
            rows.append(entry)
    return rows


def _ours(rows: pd.DataFrame, paper: Published) -> pd.Series | None:
    """Our plain ring of the same backend and N at the same size, else at our largest."""
    mine = rows[
        (rows["backend"] == paper.backend)
        & (rows["nodes"] == paper.nodes)
        & (rows["algorithm"] == PLAIN)
        & (rows["time_us"] > 0)
    ]
    if mine.empty:
        return None
    at = mine[mine["bytes"] == paper.bytes]
    if at.empty:
        at = mine[mine["bytes"] == mine["bytes"].max()]
    return at.sort_values("time_us").iloc[0]


def _machine(row: pd.Series, runs: dict) -> str:
    if str(row.get("machine") or ""):
        return str(row["machine"])
    env = runs[row["run"]].environment if row["run"] in runs else {}
    cores = env.get("cores")
    return f"this machine ({env.get('cpu_model', 'unrecorded CPU')}, {cores} cores)"


def original_table(model) -> Table:
    runs = {run.name: run for run in model.inputs.runs}
    rows = model.algorithm_rows
    body = []
    for paper in published():
        ours = _ours(rows, paper)
        if ours is None:
            mine = ["not measured", "–", "–", "–"]
        else:
            size = int(ours["bytes"])
            busbw = ours["busbw_GBps"]
            shared = bool(ours.get("shared_devices", False)) and paper.backend == "gpu"
            flags = gated(rows.loc[[ours.name]], model.gate).iloc[0]
            mine = [
                _machine(ours, runs)
                + (", N nodes on one device (no link)" if shared else "")
                + (f" (gate: {flags})" if flags else ""),
                format_bytes(size),
                format_number(ours["time_us"] / 1e3),
                format_number(busbw),
            ]
        body.append(
            [
                f"{paper.what}, N = {paper.nodes}",
                paper.machine,
                format_bytes(paper.bytes),
                # As published, not rounded again.
                f"{paper.time_ms:g}" if paper.time_ms else "–",
                f"{paper.busbw_GBps:g}" if paper.busbw_GBps else "–",
                *mine,
            ]
        )
    return Table(
        "The original study beside ours",
        ["ring", "original: machine", "size", "time (ms)", "busbw (GB/s)",
         "ours: machine", "size", "time (ms)", "busbw (GB/s)"],
        body,
        "Published figures of the original study (its README; the GPU busbw also in "
        "`config/links.yaml`) beside our plain ring at the same backend and N, at the same "
        "size where we measured it, else at our largest. Different machines: set side by "
        "side, not divided.",
    )  # fmt: skip
