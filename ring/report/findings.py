"""The report's "What we found": sentences generated from the data, each with its numbers
and the run it came from.  A sentence whose data are absent is simply not written."""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import alternation, profile_notes, trust
from .analysis import executor_of
from .ceilings import LLC_MULTIPLE
from .fmt import format_bytes, format_number, format_ratio
from .intervals import sides_of_one

__all__ = ["MAX_FINDINGS", "findings"]

MAX_FINDINGS = 10


def findings(model) -> list[str]:
    sentences = [
        *_ring_against_peers(model),
        *alternation.sentences(model.alternated),
        *_gpu_over_cpu(model),
        *_traffic_explains(model),
        *_ceiling_reached(model),
        *profile_notes.phase_sentences(model),
        *profile_notes.overhead_sentences(model),
        *_oversubscribed(model),
    ]
    return sentences[:MAX_FINDINGS]


def _interval(r) -> str:
    if np.isnan(r.ci_low):
        return "no interval: the run kept no per-call times"
    return f"95 % CI {format_ratio(r.ci_low)}–{format_ratio(r.ci_high)}"


def _span(sizes: pd.Series) -> str:
    low, high = int(sizes.min()), int(sizes.max())
    return format_bytes(low) if low == high else f"{format_bytes(low)}–{format_bytes(high)}"


def _ring_against_peers(model) -> list[str]:
    """Per (our series, peer, N) of one run: where the interval says we win, and lose."""
    ratios = model.one_run_ratios
    if ratios.empty:
        return []
    sentences = []
    for (ours, peer, nodes, run), pair in ratios.groupby(["ours", "peer", "nodes", "run"]):
        if "barrier" in ours:
            continue  # pairwise is the default; the barrier variant has its own table
        if pair["ci_low"].isna().all():
            continue  # no per-call times (a reference run): its table row says so
        largest = pair.loc[pair["bytes"].idxmax()]
        parts = sides_of_one(
            pair,
            ("speedup", "ci_low", "ci_high"),
            lambda wins, best, of: (
                f"faster at {_span(wins['bytes'])} ({len(wins)} of {of} sizes; up to "
                f"{format_ratio(best.speedup)} at {format_bytes(int(best.bytes))}, "
                f"{_interval(best)})"
            ),
            lambda losses, worst, _: (
                f"slower at {_span(losses['bytes'])} ({len(losses)} sizes; down to "
                f"{format_ratio(worst.speedup)} at {format_bytes(int(worst.bytes))}, "
                f"{_interval(worst)})"
            ),
            f"not clearly faster or slower at any size (at {format_bytes(int(largest.bytes))}: "
            f"{format_ratio(largest.speedup)}, {_interval(largest)})",
        )
        sentences.append(
            f"Against {peer} at N = {nodes}, {ours} is {' and '.join(parts)} "
            f"(time ratio {peer}/{ours}; run {run})."
        )
    return sentences


def _traffic_explains(model) -> list[str]:
    """Why the threaded ring loses to numpy-direct at large sizes: the bytes it moves."""
    rows = model.rows
    sentences = []
    for (run, nodes), part in rows[rows["backend"].isin(["cpu", "numpy-direct"])].groupby(
        ["run", "nodes"]
    ):
        largest = part[part["bytes"] == part["bytes"].max()]
        ring = largest[(largest["backend"] == "cpu") & (largest["sync"] == "pairwise")]
        ring = ring[executor_of(ring) == "nodes"]  # the node threads' bytes, the ones counted
        direct = largest[largest["backend"] == "numpy-direct"]
        if ring.empty or direct.empty or nodes < 2:
            continue
        ring, direct = ring.iloc[0], direct.iloc[0]
        moved = {
            name: row["traffic_GBps"] * row["time_us"] * 1e3
            for name, row in (("ring", ring), ("direct", direct))
        }
        if not all(np.isfinite(v) and v > 0 for v in moved.values()):
            continue
        size = int(ring["bytes"])
        ratio = moved["ring"] / moved["direct"]
        text = (
            f"At {format_bytes(size)} and N = {nodes} the ring moves "
            f"{format_number(moved['ring'] / size)}·S bytes through memory per call against "
            f"numpy-direct's {format_number(moved['direct'] / size)}·S "
            f"({format_ratio(ratio)} as many) and takes "
            f"{format_ratio(ring['time_us'] / direct['time_us'])} as long, where the extra "
            f"bytes alone at numpy-direct's rate would take {format_ratio(ratio)} (run {run})."
        )
        sentences.append(((nodes, size), text))
    # The largest N: where the extra bytes weigh most.
    return [max(sentences)[1]] if sentences else []


def _ceiling_reached(model) -> list[str]:
    fractions = model.ceiling_fractions
    if fractions.empty or "max_fraction_beyond_llc" not in fractions:
        return []
    far = fractions.dropna(subset=["max_fraction_beyond_llc"])
    if far.empty:
        return []
    far = far.astype({"max_fraction_beyond_llc": float})
    top = far.loc[far["max_fraction_beyond_llc"].idxmax()]
    low = far.loc[far["max_fraction_beyond_llc"].idxmin()]
    verdict = (
        "none is above 105 %"
        if top.max_fraction_beyond_llc <= trust.ABOVE_CEILING
        else "above 105 % is a disturbed measurement (see Caveats)"
    )
    return [
        f"At sizes of at least {LLC_MULTIPLE}× the last-level cache "
        f"({format_bytes(LLC_MULTIPLE * int(top.llc_bytes))} here), the series reach between "
        f"{format_number(100 * low.max_fraction_beyond_llc)} % ({low.series} N={low.nodes}) and "
        f"{format_number(100 * top.max_fraction_beyond_llc)} % ({top.series} N={top.nodes}, "
        f"run {top.run}) of their own run's memory ceiling ({top.ceiling}, "
        f"{format_number(top.ceiling_GBps)} GB/s); {verdict}{_drift(model)}."
    ]


def _gpu_over_cpu(model) -> list[str]:
    comparison = model.comparison("gpu_vs_cpu")
    if comparison is None:
        return []
    best = comparison.table.loc[comparison.table["speedup"].idxmax()]
    return [
        f"The GPU ring is up to {format_ratio(best['speedup'])} faster than the CPU ring "
        f"({best['fast']} N={best['nodes_fast']} over {best['slow']} N={best['nodes_slow']} "
        f"at {format_bytes(int(best['bytes']))}; runs {best['run_fast']} and {best['run_slow']}, "
        "separate launches)."
    ]


def _oversubscribed(model) -> list[str]:
    over = trust.oversubscribed(model.rows)
    if over.empty:
        return []
    nodes = sorted(set(over["nodes"]))
    runs = sorted(set(over["run"]))
    most = over["threads_per_core"].max()
    return [
        f"N = {', '.join(map(str, nodes))} ran up to {format_number(most)} threads or ranks per "
        f"core (runs {', '.join(runs)}): those points time-slice the cores, so their scaling "
        "with N is not read as the algorithm's."
    ]


def _drift(model) -> str:
    """A clause on how far the ceilings moved between the start and the end of each run."""
    drifts = [(run.name, trust.drift(run)) for run in model.inputs.runs]
    measured = [(name, value) for name, value in drifts if value is not None]
    if not measured:
        return ""
    worst_name, worst = max(measured, key=lambda item: item[1])
    moved = [name for name, value in measured if value > 0.15]
    if moved:
        return (
            f"; the ceilings moved by more than 15 % between the start and the end of "
            f"{len(moved)} of {len(measured)} runs (most: {format_number(100 * worst)} % in "
            f"{worst_name}), so the machine was not quiet, which one-run ratios withstand"
        )
    return (
        f"; the ceilings taken at the start and the end of each run agree within "
        f"{format_number(100 * worst)} % ({worst_name})"
    )
