"""Per-step times and waiting shares from the tidy profile tables of :mod:`ring.nsys`.

``nvtx_ranges.csv`` holds one row per NVTX range name: for a ring step
(``kind == "step"``) its phase, step and node, how many times it ran, and its total and
median time in ns; ``wait_ns`` is the time the range spent blocked in synchronisation
calls, measured from the trace (empty when the profile recorded no OS runtime calls).
"""

from __future__ import annotations

import pandas as pd

from ...nsys.node_counts import PHASES
from ...study.config import PROFILE_GPUS
from ..load import Profile

__all__ = ["profile_kind", "step_and_wait_tables"]

STEP_COLUMNS = ("kind", "phase", "step", "node", "count", "total_ns", "median_ns", "wait_ns")


def profile_kind(name: str) -> str:
    """The workflow target a profile folder belongs to (``nsys_cpu``, ``nsys_2gpu`` ...)."""
    lowered = name.lower()
    for kind in (*PROFILE_GPUS, "cpu"):
        if kind in lowered:
            return f"nsys_{kind}"
    return name


def on_gpu(profile: Profile) -> bool:
    """A GPU profile: its steps wait on the device (CUDA events), never in a host call, so
    a host wait share would read 0 % and say nothing."""
    return any(
        name in profile.tables and not profile.tables[name].empty
        for name in ("kernels", "memops", "gpu_steps")
    )


def _steps(profile: Profile) -> pd.DataFrame | None:
    ranges = profile.tables.get("nvtx_ranges")
    if ranges is None or not set(STEP_COLUMNS) <= set(ranges.columns):
        return None
    steps = ranges[ranges["kind"] == "step"].copy()
    if steps.empty:
        return None
    for column in ("step", "node", "count", "total_ns", "median_ns"):
        steps[column] = pd.to_numeric(steps[column])
    steps["wait_ns"] = pd.to_numeric(steps["wait_ns"], errors="coerce")
    steps["profile"] = profile.name
    return steps


def step_and_wait_tables(
    profiles: list[Profile],
) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """Per profile: the median step time by phase and step, and the share spent waiting.

    The step time is the median over nodes of each node's median; the wait share is the
    waiting inside step ranges over their total time, per phase.  ``None`` where no
    profile has step ranges (or no profile recorded waits).
    """
    step_frames, wait_frames = [], []
    for profile in profiles:
        steps = _steps(profile)
        if steps is None:
            continue
        medians = steps.groupby(["phase", "step"], sort=True)["median_ns"].median().reset_index()
        medians["step"] = medians["step"].astype(int)
        medians["median_us"] = medians["median_ns"] / 1e3
        medians["profile"] = profile.name
        medians["phase"] = pd.Categorical(medians["phase"], categories=PHASES, ordered=True)
        step_frames.append(medians)
        waited = steps[steps["wait_ns"].notna()]
        if not waited.empty and not on_gpu(profile):
            by_phase = waited.groupby("phase", sort=True)[["wait_ns", "total_ns"]].sum()
            by_phase = by_phase[by_phase["total_ns"] > 0]
            wait_frames.append(
                pd.DataFrame(
                    {
                        "profile": profile.name,
                        "phase": by_phase.index,
                        "wait_ns": by_phase["wait_ns"].to_numpy(),
                        "total_ns": by_phase["total_ns"].to_numpy(),
                        "wait_share": (by_phase["wait_ns"] / by_phase["total_ns"]).to_numpy(),
                    }
                )
            )
    steps = pd.concat(step_frames, ignore_index=True) if step_frames else None
    waits = None
    if wait_frames:
        waits = pd.concat(wait_frames, ignore_index=True)
        order = waits["phase"].map({phase: i for i, phase in enumerate(PHASES)})
        waits = waits.assign(order=order).sort_values(["profile", "order"]).drop(columns="order")
    return steps, waits
