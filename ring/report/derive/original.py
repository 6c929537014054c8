"""The original study's published figures, and this build's runs at the original's own size.

The original study (a C++/CUDA ring) published a handful of numbers; they are inputs here,
each quoted from its README.  The GPU bus bandwidths live in ``config/links.yaml`` (the
model's paper inputs) and are read from there; the two wall-clock times are the README's
own sentence.  Ours are this build's rows at the same size and N.  The two never share a
machine, so they stand side by side and are never divided.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...bench.results import busbw_factor

__all__ = ["PROJECT", "GiB", "Published", "at_original_size", "links_file", "published"]

GiB = 1 << 30
README = "original study README"
# The project tree the package sits in (a checkout; an installed wheel has no config/).
PROJECT = Path(__file__).resolve().parents[3]


def links_file() -> Path:
    """config/links.yaml of the project tree (beside the package), else of the cwd."""
    beside = PROJECT / "config" / "links.yaml"
    return beside if beside.is_file() else Path("config/links.yaml")


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

    @property
    def busbw(self) -> float | None:
        """Its bus bandwidth: as published, else from its time (nccl-tests' formula)."""
        if self.busbw_GBps is not None:
            return self.busbw_GBps
        if self.time_ms is None:
            return None
        return self.bytes / (self.time_ms / 1e3) / 1e9 * busbw_factor(self.nodes)


# "Max speedup: 29.3x (GPU vs. CPU wall-clock time at the 1 GiB buffer size — 11.3 ms vs.
# 331.7 ms)"; CPU: "e2-standard-8 VM (8 vCPU AMD EPYC 7B12 ...), N=4 threads"; GPU: "2x NVIDIA
# A100 SXM 80GB connected via NVLink ... N=2 physical devices".
_TIMES = (
    Published("CPU ring (std::jthread per node, std::barrier after every step)", "cpu", 4, GiB,
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


def at_original_size(rows: pd.DataFrame, size: int = GiB) -> pd.DataFrame:
    """This build's rows of the cpu kind at the original's CPU size, every N; where none
    was measured at that size, at the largest size measured (the table says which)."""
    kinds = ("cpu", "numpy-direct", "seed-cpp")
    mine = rows[rows["backend"].isin(kinds)]
    if mine.empty:
        return mine
    at = mine[mine["bytes"] == size]
    if at.empty:
        at = mine[mine["bytes"] == mine["bytes"].max()]
    return at.sort_values(["nodes", "time_us"])
