"""Each profile's message in one sentence: where a ring step's time goes (device work, host
launch and synchronisation, waiting for a neighbour, time-slicing), with its numbers, all
read from the profile's own tables and the bench run it wrapped (``bench.json``)."""

from __future__ import annotations

import pandas as pd

from ..derive.profiles import on_gpu
from .fmt import format_bytes, format_number, format_ratio
from .profile_notes import bench_meta

__all__ = ["messages"]


def _median(table: pd.DataFrame | None, mask=None) -> float | None:
    if table is None or table.empty or "median_ns" not in table:
        return None
    part = table if mask is None else table[mask(table)]
    values = pd.to_numeric(part["median_ns"], errors="coerce").dropna()
    return float(values.median()) / 1e3 if not values.empty else None


def _where(profile, meta: dict | None) -> str:
    config = (meta or {}).get("config") or {}
    nodes = (config.get("nodes") or [None])[0]
    backends = ",".join(config.get("backends") or []) or "ring"
    sizes = config.get("sizes") or []
    on = f" on {profile.machine}" if profile.machine else ""
    where = f"Profile {profile.name}{on} ({backends}" + (f", N = {nodes}" if nodes else "")
    if len(sizes) == 1:
        calls = f", {config['iters']} timed calls" if config.get("iters") else ""
        where += f", {format_bytes(int(sizes[0]))} per node{calls}"
    return where + ")"


def _gpu(profile, meta, step_us: float) -> str | None:
    kernels = profile.tables.get("kernels")
    memops = profile.tables.get("memops")
    add_us = _median(kernels, lambda t: t["name"].astype(str).str.contains("add"))
    copy_us = _median(memops, lambda t: t["kind"].astype(str) == "device_to_device")
    if add_us is None and copy_us is None:
        return None
    device = (add_us or 0.0) + (copy_us or 0.0)
    parts = [f"a median add kernel of {format_number(add_us)} µs"] if add_us else []
    parts += [f"a device-to-device copy of {format_number(copy_us)} µs"] if copy_us else []
    verdict = (
        "the host, launching and synchronising, not the GPU's work, sets the step's time"
        if step_us > 2 * device
        else "the device work sets the step's time"
    )
    return (
        f"{_where(profile, meta)}: a ring step takes a median {format_number(step_us)} µs of "
        f"host time around {format_number(device)} µs of device work ({' and '.join(parts)}; "
        f"{format_ratio(step_us / device)}): {verdict}."
    )


def _host(profile, meta, step_us: float, waits: pd.DataFrame | None) -> str:
    text = f"{_where(profile, meta)}: a ring step takes a median {format_number(step_us)} µs"
    mine = None if waits is None else waits[waits["profile"] == profile.name]
    if mine is not None and not mine.empty:
        waited = float(mine["wait_ns"].sum() / mine["total_ns"].sum())
        text += f", {format_number(100 * waited)} % of it blocked waiting for a neighbour"
    config = (meta or {}).get("config") or {}
    env = (meta or {}).get("environment") or {}
    nodes = (config.get("nodes") or [None])[0]
    cores = env.get("usable_cores") or env.get("cores")
    if isinstance(nodes, int) and isinstance(cores, int) and cores > 0:
        if nodes > cores:
            text += (
                f"; {nodes} node threads share {cores} cores, so the waiting is time-slicing: "
                "a neighbour is not slow, it is not running"
            )
        else:
            text += f"; {nodes} node threads on {cores} cores, each with a core of its own"
    return text + "."


def messages(model) -> list[str]:
    steps = model.profile_steps
    found = []
    for profile in model.inputs.profiles:
        if steps is None:
            break
        mine = steps[steps["profile"] == profile.name]
        if mine.empty:
            continue
        step_us = float(mine["median_us"].median())
        meta = bench_meta(profile)
        sentence = (
            _gpu(profile, meta, step_us)
            if on_gpu(profile)
            else _host(profile, meta, step_us, model.profile_waits)
        )
        if sentence:
            found.append(sentence)
    return found
