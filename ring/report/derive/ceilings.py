"""Ceilings: the bandwidth each run measured its hardware at, each series against the
ceilings of its own run, and the single-GPU kernel sweep against device copy.

A ceiling is a leaf of a run's ``ceilings`` (a key path containing ``GBps``); a null is
"not measured" and stays so.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from ..load import KernelBandwidth, Run

__all__ = [
    "DETAIL_KEYS",
    "DEVICE_BACKENDS",
    "LLC_MULTIPLE",
    "all_ceilings",
    "ceiling_fractions",
    "ceilings_of",
    "drift",
    "flatten_ceilings",
    "kernel_ceilings",
    "kernel_summary",
    "llc_bytes",
    "memory_ceiling",
]

# Backends whose nodes are GPUs: they meet device ceilings, the others host memory's.
DEVICE_BACKENDS = ("gpu", "nccl")

# Ceiling names that describe a GPU (device memory or a link between devices).
_DEVICE_CEILING = re.compile(r"d2d|peer|p2p|device|gpu|nvlink", re.IGNORECASE)
# Ceilings of a link between devices are compared with busbw (as nccl-tests and
# nvbandwidth do); ceilings of one memory with the schedule's memory traffic.
_LINK_CEILING = re.compile(r"peer|p2p|nvlink|link", re.IGNORECASE)

# Keys of a run's ``ceilings`` that describe how the top-level values were taken (both
# host measurements, the cache size, the drift); the top-level values are the ceilings.
DETAIL_KEYS = ("host_memory",)
_CEILING_COLUMNS = ["run", "ceiling", "GBps", "device", "link"]
# STREAM's rule: arrays of at least this many times the last-level cache leave every cache.
LLC_MULTIPLE = 4


def flatten_ceilings(ceilings: dict, prefix: str = "") -> list[tuple[str, float | None]]:
    """Every bandwidth leaf (a key path containing ``GBps``) of a run's ``ceilings``.

    Nested objects (per device, per pair, per direction) become ``key[sub][sub]``; a null
    stays ``None`` (not measured), never a number.
    """
    leaves: list[tuple[str, float | None]] = []
    for key, value in ceilings.items():
        if not prefix and key in DETAIL_KEYS:
            continue
        path = f"{prefix}[{key}]" if prefix else str(key)
        if isinstance(value, dict):
            leaves.extend(flatten_ceilings(value, path))
        elif isinstance(value, list):
            leaves.extend(flatten_ceilings(dict(enumerate(value)), path))
        elif "GBps" in path and (value is None or isinstance(value, int | float)):
            if isinstance(value, bool):
                continue
            leaves.append((path, None if value is None else float(value)))
    return leaves


def ceilings_of(run: Run) -> pd.DataFrame:
    """A run's ceilings as rows: ceiling, GBps (NaN where the JSON holds null), device, link."""
    leaves = flatten_ceilings(run.ceilings)
    return pd.DataFrame(
        {
            "run": run.name,
            "ceiling": [name for name, _ in leaves],
            "GBps": [math.nan if v is None else v for _, v in leaves],
            "device": [bool(_DEVICE_CEILING.search(name)) for name, _ in leaves],
            "link": [bool(_LINK_CEILING.search(name)) for name, _ in leaves],
        },
        columns=_CEILING_COLUMNS,
    )


def all_ceilings(runs: list[Run]) -> pd.DataFrame:
    frames = [ceilings_of(run) for run in runs]
    if not frames:
        return pd.DataFrame(columns=_CEILING_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def _host_memory(run: Run) -> dict:
    detail = run.ceilings.get("host_memory")
    return detail if isinstance(detail, dict) else {}


def llc_bytes(run: Run) -> int | None:
    """The last-level cache the run's harness read (None for older results)."""
    value = _host_memory(run).get("llc_bytes")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def drift(run: Run) -> float | None:
    """How far the run's host ceilings moved between its start and its end (a fraction)."""
    value = _host_memory(run).get("drift")
    return float(value) if isinstance(value, int | float) else None


def memory_ceiling(run: Run, kernel: str = "add") -> tuple[float, float] | None:
    """A host memory ceiling as the run measured it at its start and at its end (GB/s):
    the lower and the higher of the two; None where the run did not measure it."""
    detail = _host_memory(run)
    values = []
    for when in ("start", "end"):
        measured = detail.get(when)
        value = measured.get(f"{kernel}_GBps") if isinstance(measured, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            values.append(float(value))
    if not values:
        top = run.ceilings.get(f"{kernel}_GBps")
        if isinstance(top, int | float) and not isinstance(top, bool) and top > 0:
            values = [float(top)]
    return (min(values), max(values)) if values else None


def ceiling_fractions(
    rows: pd.DataFrame, ceilings: pd.DataFrame, llc: dict[str, int | None] | None = None
) -> pd.DataFrame:
    """Each series against the ceilings of its own run that apply to its hardware.

    GPU backends meet device ceilings (a link ceiling compared with busbw, a memory ceiling
    with the schedule's memory traffic).  Host backends meet one ceiling: the fastest host
    memory kernel of their run (copy, add or triad, whichever moved the most bytes per
    second), since the kernels count bytes alike and memory can go no faster than its best.
    Reported at the largest size, at the size where the fraction is highest, and at the
    highest among sizes of at least 4x the run's last-level cache (``llc``: run -> bytes),
    where no cache can serve the buffers.
    """
    llc = llc or {}
    records = []
    measured = ceilings[ceilings["GBps"].notna() & (ceilings["GBps"] > 0)]
    for (series, nodes, run, backend), group in rows.groupby(
        ["series", "nodes", "run", "backend"], sort=True
    ):
        on_device = backend in DEVICE_BACKENDS
        mine = measured[(measured["run"] == run) & (measured["device"] == on_device)]
        if not on_device and not mine.empty:
            mine = mine.loc[[mine["GBps"].idxmax()]]
        for ceiling in mine.itertuples():
            metric = "busbw_GBps" if ceiling.link else "traffic_GBps"
            known = group[group[metric].notna()]
            if known.empty:
                continue  # e.g. NCCL's memory traffic, which the harness cannot see
            record = _fraction_record(series, nodes, ceiling, metric, known, llc.get(run))
            records.append({**record, "run": run})
    return pd.DataFrame.from_records(records, columns=_FRACTION_COLUMNS)


_FRACTION_COLUMNS = [
    "series",
    "nodes",
    "ceiling",
    "ceiling_GBps",
    "metric",
    "largest_bytes",
    "value_at_largest",
    "fraction_at_largest",
    "max_fraction",
    "max_at_bytes",
    "llc_bytes",
    "max_fraction_beyond_llc",
    "beyond_llc_at_bytes",
    "run",
]


def _fraction_record(series, nodes, ceiling, metric, known, llc_bytes) -> dict:
    fraction = known[metric] / ceiling.GBps
    last = known.loc[known["bytes"].idxmax()]
    best = fraction.idxmax()
    beyond = fraction[known["bytes"] >= LLC_MULTIPLE * llc_bytes] if llc_bytes else fraction[[]]
    far = beyond.idxmax() if not beyond.empty else None
    return {
        "series": series,
        "nodes": int(nodes),
        "ceiling": ceiling.ceiling,
        "ceiling_GBps": float(ceiling.GBps),
        "metric": metric,
        "largest_bytes": int(last["bytes"]),
        "value_at_largest": float(last[metric]),
        "fraction_at_largest": float(last[metric] / ceiling.GBps),
        "max_fraction": float(fraction[best]),
        "max_at_bytes": int(known.at[best, "bytes"]),
        "llc_bytes": llc_bytes,
        "max_fraction_beyond_llc": None if far is None else float(beyond[far]),
        "beyond_llc_at_bytes": None if far is None else int(known.at[far, "bytes"]),
    }


def kernel_summary(kernel_sweeps: list[KernelBandwidth]) -> pd.DataFrame:
    """Per kernel sweep, device and kernel (ours, CuPy's ufunc; sweeps before the ``kernel``
    column measured the ufunc): kernel against copy at the largest size, and best."""
    records = []
    for result in kernel_sweeps:
        rows = result.rows.dropna(subset=["kernel_GBps", "copy_GBps"])
        rows = rows[rows["copy_GBps"] > 0]
        rows = rows.assign(
            device=rows["device"].astype(str) if "device" in rows else "",
            kernel=rows["kernel"].astype(str) if "kernel" in rows else "ufunc",
        )
        for (device, kernel), part in rows.groupby(["device", "kernel"], sort=True):
            if not part.empty:
                records.append(_kernel_record(result.name, str(device), str(kernel), part))
    return pd.DataFrame.from_records(records)


def _kernel_record(run: str, device: str, kernel: str, part: pd.DataFrame) -> dict:
    ratio = part["kernel_GBps"] / part["copy_GBps"]
    last = part.loc[part["bytes"].idxmax()]
    best = ratio.idxmax()
    return {
        "run": run,
        "device": device,
        "kernel": kernel,
        "largest_bytes": int(last["bytes"]),
        "kernel_GBps": float(last["kernel_GBps"]),
        "copy_GBps": float(last["copy_GBps"]),
        "ratio_at_largest": float(last["kernel_GBps"] / last["copy_GBps"]),
        "max_ratio": float(ratio[best]),
        "max_at_bytes": int(part.at[best, "bytes"]),
    }


def kernel_ceilings(kernel_sweeps: list[KernelBandwidth]) -> pd.DataFrame:
    """The device ceilings each kernel sweep measured, as :func:`ceilings_of` gives a run's."""
    frames = []
    for result in kernel_sweeps:
        leaves = flatten_ceilings(result.meta.get("ceilings") or {})
        frames.append(
            pd.DataFrame(
                {
                    "run": result.name,
                    "ceiling": [n for n, _ in leaves],
                    "GBps": [math.nan if v is None else v for _, v in leaves],
                    "device": True,
                    "link": False,
                },
                columns=_CEILING_COLUMNS,
            )
        )
    if not frames:
        return pd.DataFrame(columns=_CEILING_COLUMNS)
    return pd.concat(frames, ignore_index=True)
