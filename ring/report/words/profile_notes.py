"""What qualifies a profile: the profiler's own cost (``overhead.json``, written by
``python -m ring.nsys.overhead`` in the same workflow), the bench run it wrapped
(``bench.json``: command, time, ceilings), and why its all-gather and reduce-scatter steps
differ, worked out from the profile's own numbers."""

from __future__ import annotations

import json
from pathlib import Path

from ...bench.ceilings import copy_traffic_bytes
from .fmt import format_bytes, format_number, format_ratio

__all__ = ["bench_meta", "inputs_row", "overhead", "overhead_sentences", "phase_sentences"]


def _json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def overhead(profile) -> dict | None:
    return _json(Path(profile.path) / "overhead.json")


def bench_meta(profile) -> dict | None:
    return _json(Path(profile.path) / "bench.json")


def overhead_sentences(model) -> list[str]:
    found = []
    for profile in model.inputs.profiles:
        measured = overhead(profile)
        if not measured or not measured.get("ratio"):
            continue
        verdict = "within" if measured["ratio"] <= measured.get("target_ratio", 1.1) else "above"
        runs = measured["repeats"]
        runs = f"{runs} alternating runs" if runs != 1 else "one plain and one profiled run"
        found.append(
            f"Under Nsight Systems the profiled bench ran {format_ratio(measured['ratio'])} as "
            f"long as without it ({runs} of "
            f"{measured['size']} at N = {measured['nodes']}, nsys {measured['nsys']}; "
            f"{verdict} the {format_ratio(measured.get('target_ratio', 1.1))} target), so the "
            + (
                f"profile {profile.name}'s step times stand for the unprofiled ring's."
                if verdict == "within"
                else f"profile {profile.name}'s times are read as shares, not as the ring's speed."
            )
        )
    return found


def _phase_numbers(model, profile) -> dict | None:
    steps, waits = model.profile_steps, model.profile_waits
    meta = bench_meta(profile)
    if steps is None or meta is None:
        return None
    mine = steps[steps["profile"] == profile.name]
    medians = mine.groupby("phase", observed=True)["median_us"].median()
    if not {"reduce_scatter", "all_gather"} <= set(medians.index):
        return None
    config, ceilings = meta.get("config") or {}, meta.get("ceilings") or {}
    if set(config.get("backends") or ["cpu"]) != {"cpu"}:
        return None  # device buffers: host memory ceilings do not apply to its steps
    size, nodes = (config.get("sizes") or [None])[-1], (config.get("nodes") or [None])[0]
    if not (size and nodes and ceilings.get("add_GBps") and ceilings.get("copy_GBps")):
        return None
    share = {}
    if waits is not None:
        for r in waits[waits["profile"] == profile.name].itertuples():
            share[r.phase] = float(r.wait_share)
    chunk = size // nodes
    return {
        "size": size,
        "nodes": nodes,
        "rs_us": float(medians["reduce_scatter"]),
        "ag_us": float(medians["all_gather"]),
        # What each step moves, at this run's ceilings (ring.bench.ceilings' convention).
        "rs_model_us": 3 * chunk / ceilings["add_GBps"] / 1e3,
        "ag_model_us": copy_traffic_bytes(chunk) / ceilings["copy_GBps"] / 1e3,
        "ag_bytes": copy_traffic_bytes(chunk),
        "rs_wait": share.get("reduce_scatter"),
        "ag_wait": share.get("all_gather"),
    }


def phase_sentences(model) -> list[str]:
    """Why an all-gather step and a reduce-scatter step take what they take."""
    found = []
    for profile in model.inputs.profiles:
        n = _phase_numbers(model, profile)
        if n is None:
            continue
        measured, predicted = n["ag_us"] / n["rs_us"], n["ag_model_us"] / n["rs_model_us"]
        text = (
            f"In profile {profile.name} (N = {n['nodes']}, {format_bytes(n['size'])} per node) "
            f"an all-gather step takes a median {format_number(n['ag_us'])} µs against "
            f"{format_number(n['rs_us'])} µs for a reduce-scatter step "
            f"({format_ratio(measured)}); the bytes each moves at the run's copy and add "
            f"ceilings predict {format_number(n['ag_model_us'])} and "
            f"{format_number(n['rs_model_us'])} µs ({format_ratio(predicted)})"
        )
        if n["ag_wait"] is not None and n["rs_wait"] is not None:
            busy = n["ag_us"] * (1 - n["ag_wait"])
            text += (
                f"; {format_number(100 * n['ag_wait'])} % of all-gather and "
                f"{format_number(100 * n['rs_wait'])} % of reduce-scatter step time is spent "
                f"blocked waiting for a neighbour, and the all-gather copies, net of that, run "
                f"at {format_number(n['ag_bytes'] / busy / 1e3)} GB/s"
            )
            text += (
                f"; each step takes {format_ratio(n['ag_us'] / n['ag_model_us'])} "
                f"(all-gather) and {format_ratio(n['rs_us'] / n['rs_model_us'])} "
                "(reduce-scatter) the time of its bytes"
            )
            if n["ag_wait"] - n["rs_wait"] > 0.2:
                text += ": waiting, not copying, makes the all-gather steps longer"
            elif measured > 1.5 * predicted:
                text += ": the copies themselves run below the copy ceiling"
        found.append(text + ".")
    return found


def inputs_row(profile) -> list[str]:
    """The profile's line of the Inputs table: the command it wrapped, when, its ceilings and
    the profiler's measured cost."""
    meta = bench_meta(profile) or {}
    command = meta.get("launch_command") or meta.get("command")
    wrapped = f"nsys profile … -- {' '.join(map(str, command))}" if command else "not recorded"
    when = f"{meta.get('start_time')} – {meta.get('end_time')}" if meta else ""
    ceilings = meta.get("ceilings") or {}
    shown = "; ".join(
        f"{name} {format_number(ceilings[name])}"
        for name in ("copy_GBps", "add_GBps", "triad_GBps")
        if isinstance(ceilings.get(name), int | float)
    )
    cost = overhead(profile)
    tables = ", ".join(profile.tables)
    if cost and cost.get("ratio"):
        tables += f"; profiler overhead {format_ratio(cost['ratio'])} (overhead.json)"
    return [profile.name, "profile", str(profile.path), tables, wrapped, when, shown]
