"""``summary.md``: the profile tables in Markdown plus the figures derived from them.

Derived figures:

* collective calls per node count N, read off the step ranges alone: a call on N nodes
  emits ``<phase> step s node i`` for every s < N - 1 and i < N, so the count of
  ``step s node 0`` is the number of calls with N >= s + 2;
* step ranges (and so transfers) per call: N (N - 1) per phase, 2 N (N - 1) per
  allreduce (4 for N = 2, 24 for N = 4), against the peer-to-peer copies counted;
* wait share: the fraction of each step's time spent blocked in synchronisation
  primitives (from ``waits``, i.e. the trace, not the whole-run ``osrt`` totals).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from ..report.fmt import markdown_table
from .tables import read_tables

__all__ = ["calls_by_nodes", "render_summary", "write_summary"]

PHASES = ("reduce_scatter", "all_gather")
# Which schedule phases each collective runs (as ring.cpu.COLLECTIVE_PHASES).
COLLECTIVE_PHASES = {
    "allreduce": PHASES,
    "reduce_scatter": ("reduce_scatter",),
    "all_gather": ("all_gather",),
}


def calls_by_nodes(step_rows: list[dict], phase: str) -> dict[int, int] | None:
    """Calls that ran ``phase`` per node count N, inferred from its step-range counts.

    ``None`` when the counts fit no mix of node counts (a cut-off profile, ranges of
    several processes with different counts ...); ``{}`` when the phase never ran.
    """
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for row in step_rows:
        if row["kind"] == "step" and row["phase"] == phase:
            counts[(int(row["step"]), int(row["node"]))] += int(row["count"])
    if not counts:
        return {}
    top = max(max(step + 2, node + 1) for step, node in counts)
    at_least = {k: counts.get((k - 2, 0), 0) for k in range(2, top + 1)}
    at_least[top + 1] = 0
    for (step, node), count in counts.items():
        if count != at_least[max(step + 2, node + 1)]:
            return None
    for k in range(2, top + 1):
        expected = {(s, i) for s in range(k - 1) for i in range(k)} if at_least[k] else set()
        if not expected <= counts.keys():
            return None
    calls = {k: at_least[k] - at_least[k + 1] for k in range(2, top + 1)}
    if any(value < 0 for value in calls.values()):
        return None
    return {k: v for k, v in calls.items() if v}


def _us(ns) -> str:
    return "" if ns is None or ns == "" else f"{ns / 1e3:,.1f}"


def _pct(share) -> str:
    return "" if share is None or share == "" else f"{100 * share:.1f} %"


def _mb(nbytes) -> str:
    return "" if nbytes is None or nbytes == "" else f"{nbytes / 1e6:,.3f}"


def _table(header: list[str], rows: list[list]) -> list[str]:
    return [*markdown_table(header, rows).split("\n"), ""]


def _gpu_sections(steps: list[dict], transfers: list[dict], streams: list[dict], on_gpu) -> list:
    """The device's side of the steps, from the GPU trace (ring.nsys.gputrace)."""
    out = []
    if on_gpu:
        out += [
            "Step ranges above are the host enqueueing each step's copy or kernel; the GPU "
            "waits for its neighbour on the device (CUDA events), so no host wait share is "
            "shown." + ("" if steps else " The GPU trace reports were not given, so the "
                        "device time per step is not known here."),
            "",
        ]  # fmt: skip
    if steps:
        out += ["### Steps on the device (GPU trace)", ""]
        out += _table(
            ["phase", "step", "node", "calls", "GPU ops", "device median (µs)",
             "idle before (median µs)"],
            [
                [r["phase"], r["step"], r["node"], r["count"], r["ops"],
                 _us(r["device_median_ns"]),
                 "" if r["gap_median_ns"] is None else _us(r["gap_median_ns"])]
                for r in steps
            ],
        )  # fmt: skip
        device = sum(r["device_total_ns"] for r in steps)
        idle = sum(r["gap_total_ns"] or 0 for r in steps)
        if device + idle:
            out += [
                f"On the device, steps ran {_us(device)} µs and their streams sat idle "
                f"{_us(idle)} µs before them ({_pct(idle / (device + idle))} idle): "
                + ("the host, not the GPU, sets the pace." if idle > device else
                   "the GPU work, not the host, sets the pace."),
                "",
            ]  # fmt: skip
    if transfers:
        out += ["### Transfers per call (GPU trace, inside the calls)", ""]
        out += _table(
            ["N", "kind", "calls", "transfers", "per call"],
            [[r["nodes"], r["kind"], r["calls"], r["transfers"], f"{r['per_call']:.2f}"]
             for r in transfers],
        )  # fmt: skip
    if streams:
        out += ["### Device streams during the calls (GPU trace)", ""]
        out += _table(
            ["device", "stream", "ops", "kernels", "copies", "busy (µs)", "idle (µs)"],
            [[r["device"], r["stream"], r["ops"], r["kernels"], r["copies"], _us(r["busy_ns"]),
              _us(r["idle_ns"])] for r in streams],
        )  # fmt: skip
    return out


def _profile_section(profile: str, tables: dict[str, list[dict]]) -> list[str]:
    def mine(name: str) -> list[dict]:
        return [row for row in tables[name] if row["profile"] == profile]

    nvtx, memops, kernels = mine("nvtx_ranges"), mine("memops"), mine("kernels")
    osrt, waits = mine("osrt"), mine("waits")
    out = [f"## Profile `{profile}`", ""]
    calls = [row for row in nvtx if row["kind"] == "call"]
    steps = [row for row in nvtx if row["kind"] == "step"]
    gpu_steps = mine("gpu_steps")
    on_gpu = bool(memops or kernels or gpu_steps)
    # A GPU step's host thread never blocks inside it (the waits are stream events on the
    # device), so a host wait share would read 0 % and explain nothing.
    has_waits = not on_gpu and any(row["wait_ns"] is not None for row in steps)

    # -- calls and node counts -----------------------------------------------------
    per_phase = {phase: calls_by_nodes(steps, phase) for phase in PHASES}
    calls_total = sum(int(row["count"]) for row in calls)
    if calls:
        out += ["### Collective calls (outer NVTX ranges)", ""]
        out += _table(
            ["collective", "calls", "total (µs)", "median (µs)", "min (µs)", "max (µs)"]
            + (["wait share"] if has_waits else []),
            [
                [row["phase"], row["count"], _us(row["total_ns"]), _us(row["median_ns"]),
                 _us(row["min_ns"]), _us(row["max_ns"])]
                + ([_pct(row["wait_share"])] if has_waits else [])
                for row in calls
            ],
        )  # fmt: skip
    if steps:
        out += ["### Steps per call, N = 2 vs N = 4 (from the step ranges)", ""]
        rows = []
        for phase in PHASES:
            found = per_phase[phase]
            if found is None:
                rows.append([phase, "counts fit no mix of node counts", "", "", ""])
                continue
            for nodes, count in sorted(found.items()):
                rows.append([phase, nodes, count, nodes - 1, nodes * (nodes - 1)])
        out += _table(
            ["phase", "N", "calls", "steps per node per call", "step ranges per call"], rows
        )
        both = [per_phase[p] for p in PHASES]
        if all(found is not None for found in both):
            nodes_seen = sorted(set().union(*(found.keys() for found in both)))
            lines = [
                f"- N = {n}: an allreduce is {2 * (n - 1)} steps per node, "
                f"{2 * n * (n - 1)} step transfers in all"
                for n in nodes_seen
            ]
            if 2 in nodes_seen and 4 in nodes_seen:
                lines.append(
                    "- N = 4 moves 24 chunks per allreduce against 4 for N = 2 (6x the "
                    "transfers, each a quarter instead of half of the buffer)."
                )
            out += [*lines, ""]

    # -- steps: time and waiting ---------------------------------------------------
    if steps:
        out += ["### Steps (all nodes together)", ""]
        grouped: dict[tuple[str, int], list[dict]] = defaultdict(list)
        for row in steps:
            grouped[(row["phase"], int(row["step"]))].append(row)
        rows = []
        for (phase, step), group in sorted(
            grouped.items(), key=lambda item: (PHASES.index(item[0][0]), item[0][1])
        ):
            total = sum(r["total_ns"] for r in group)
            count = sum(int(r["count"]) for r in group)
            wait = sum(r["wait_ns"] or 0 for r in group) if has_waits else None
            row = [phase, step, len(group), count, _us(total), _us(total / count if count else 0)]
            if has_waits:
                row += [_us(wait), _pct(wait / total if total else 0)]
            rows.append(row)
        out += _table(
            ["phase", "step", "nodes", "ranges", "total (µs)", "mean (µs)"]
            + (["waiting (µs)", "wait share"] if has_waits else []),
            rows,
        )
        if has_waits:
            total = sum(r["total_ns"] for r in steps)
            wait = sum(r["wait_ns"] or 0 for r in steps)
            out += [
                f"Wait share over all steps: {_pct(wait / total if total else 0)} of "
                f"{_us(total)} µs spent in steps was spent blocked in synchronisation "
                "primitives (left-neighbour signals, barriers, the GIL).",
                "",
            ]
            by_function: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for row in waits:
                if row["step"] != "":
                    by_function[row["function"]][0] += int(row["calls"])
                    by_function[row["function"]][1] += int(row["wait_ns"])
            if by_function:
                out += _table(
                    ["blocking call inside steps", "calls", "waiting (µs)", "share of step time"],
                    [
                        [fn, calls_, _us(ns), _pct(ns / total if total else 0)]
                        for fn, (calls_, ns) in sorted(by_function.items(), key=lambda i: -i[1][1])
                    ],
                )
        out += ["### Step ranges by node", ""]
        out += _table(
            ["range", "count", "total (µs)", "median (µs)", "min (µs)", "max (µs)"]
            + (["wait share"] if has_waits else []),
            [
                [row["range"], row["count"], _us(row["total_ns"]), _us(row["median_ns"]),
                 _us(row["min_ns"]), _us(row["max_ns"])]
                + ([_pct(row["wait_share"])] if has_waits else [])
                for row in steps
            ],
        )  # fmt: skip
    out += _gpu_sections(gpu_steps, mine("gpu_transfers"), mine("gpu_streams"), on_gpu)
    others = [row for row in nvtx if row["kind"] == "other"]
    if others:
        out += ["### Other NVTX ranges", ""]
        out += _table(
            ["range", "count", "total (µs)", "median (µs)"],
            [[r["range"], r["count"], _us(r["total_ns"]), _us(r["median_ns"])] for r in others],
        )

    # -- GPU memory operations and kernels ---------------------------------------------
    if memops:
        out += ["### GPU memory operations", ""]
        out += _table(
            ["operation", "kind", "count", "total (µs)", "median (µs)", "total (MB)",
             "per copy (MB)"],
            [
                [r["operation"], r["kind"], r["count"], _us(r["total_ns"]), _us(r["median_ns"]),
                 _mb(r["total_bytes"]), _mb(r["avg_bytes"])]
                for r in memops
            ],
        )  # fmt: skip
        peer = sum(int(r["count"]) for r in memops if r["kind"] == "peer_to_peer")
        expected = None
        if calls and all(per_phase[p] is not None for p in PHASES):
            expected = sum(n * (n - 1) * c for p in PHASES for n, c in per_phase[p].items())
        lines = [f"- Peer-to-peer copies: {peer}."]
        if calls_total:
            lines.append(
                f"- Transfers per call: {peer / calls_total:.2f} peer-to-peer copies per "
                f"collective call ({calls_total} calls)."
            )
        if expected is not None:
            lines.append(
                f"- The ring schedule moves {expected} chunks for these calls "
                f"(N (N - 1) per phase per call); peer-to-peer copies counted: {peer}."
            )
        out += [*lines, ""]
    if kernels:
        out += ["### GPU kernels", ""]
        merged: dict[str, list] = {}
        for r in kernels:
            entry = merged.setdefault(r["name"], [0, 0, 0])
            entry[0] += int(r["count"])
            entry[1] += r["total_ns"]
            entry[2] += 1
        out += _table(
            ["kernel", "count", "total (µs)", "mean (µs)"] + (["per call"] if calls_total else []),
            [
                [name, count, _us(total), _us(total / count if count else 0)]
                + ([f"{count / calls_total:.2f}"] if calls_total else [])
                for name, (count, total, _) in sorted(merged.items(), key=lambda i: -i[1][1])
            ],
        )
        if any(r["grid_xyz"] for r in kernels):
            out += ["(nsys 2022 splits kernels by grid and block size; see kernels.csv.)", ""]

    # -- OS runtime ------------------------------------------------------------------
    if osrt:
        sync = [r for r in osrt if r["sync_wait"]]
        out += ["### OS runtime: blocking synchronisation calls (whole run, all threads)", ""]
        if sync:
            out += _table(
                ["function", "calls", "total (µs)", "median (µs)", "max (µs)"],
                [[r["function"], r["count"], _us(r["total_ns"]), _us(r["median_ns"]),
                  _us(r["max_ns"])] for r in sync],
            )  # fmt: skip
        else:
            out += ["No blocking synchronisation calls were traced.", ""]
        if sync and not has_waits:
            out += [
                "These totals include threads idling between calls; the per-step wait "
                "share needs the ring_waits report (ring.nsys.export_stats writes it).",
                "",
            ]
    if len(out) == 2:
        out += ["No report of this profile had data.", ""]
    return out


def _across_profiles(profiles: list[str], tables: dict[str, list[dict]]) -> list[str]:
    """One line per profile: how N, transfers and waiting compare (e.g. 2gpu vs 4gpu)."""
    rows = []
    for profile in profiles:
        nvtx = [r for r in tables["nvtx_ranges"] if r["profile"] == profile]
        steps = [r for r in nvtx if r["kind"] == "step"]
        calls = sum(int(r["count"]) for r in nvtx if r["kind"] == "call")
        found = [calls_by_nodes(steps, phase) for phase in PHASES]
        nodes = (
            "?"
            if any(f is None for f in found)
            else ", ".join(str(n) for n in sorted(set().union(*(f.keys() for f in found))))
        )
        step_ranges = sum(int(r["count"]) for r in steps)
        memops = [r for r in tables["memops"] if r["profile"] == profile]
        kernels = [r for r in tables["kernels"] if r["profile"] == profile]
        peer = sum(int(r["count"]) for r in memops if r["kind"] == "peer_to_peer")
        launches = sum(int(r["count"]) for r in kernels)
        total = sum(r["total_ns"] for r in steps)
        waited = [r["wait_ns"] for r in steps if r["wait_ns"] is not None]
        share = _pct(sum(waited) / total) if waited and total else ""

        def per_call(count: int, has_data: bool = True, calls: int = calls) -> str:
            return f"{count / calls:.2f}" if calls and has_data else ""

        rows.append(
            [profile, nodes or "", calls, per_call(step_ranges, bool(steps)),
             per_call(peer, bool(memops)), per_call(launches, bool(kernels)), share]
        )  # fmt: skip
    return [
        "## Profiles side by side",
        "",
        *_table(
            ["profile", "N", "calls", "step ranges per call", "peer-to-peer copies per call",
             "kernels per call", "wait share of steps"],
            rows,
        ),
    ]  # fmt: skip


def render_summary(tables: dict[str, list[dict]], title: str = "Nsight Systems profile") -> str:
    """The Markdown text of :func:`write_summary`."""
    profiles = sorted({row["profile"] for rows in tables.values() for row in rows})
    lines = [f"# {title}", ""]
    lines += [
        "Times in µs (the tables/*.csv files keep nanoseconds), sizes in MB = 10^6 bytes.",
        "",
    ]
    if not profiles:
        lines += ["No report had data.", ""]
    if len(profiles) > 1:
        lines += _across_profiles(profiles, tables)
    for profile in profiles:
        lines += _profile_section(profile, tables)
    return "\n".join(lines).rstrip() + "\n"


def write_summary(
    tables_dir: str | os.PathLike, out_md: str | os.PathLike, title: str | None = None
) -> Path:
    """Read the tables in ``tables_dir`` and write ``out_md``."""
    tables = read_tables(tables_dir)
    out = Path(out_md)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_summary(tables, title or "Nsight Systems profile"))
    return out
