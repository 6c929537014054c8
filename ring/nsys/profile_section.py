"""One profile's part of ``summary.md``: a section per question the tables answer.

Each section function takes the profile's rows (:class:`ProfileRows`) and returns its
Markdown lines, or none when the profile has no data for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from .markdown import mb, pct, table, us
from .node_counts import PHASES, calls_by_nodes

__all__ = ["ProfileRows", "profile_section"]


@dataclass(frozen=True)
class ProfileRows:
    """The rows of every table that belong to one profile, and what several sections use."""

    tables: dict[str, list[dict]]
    calls: list[dict]
    steps: list[dict]
    on_gpu: bool
    has_waits: bool
    per_phase: dict[str, dict[int, int] | None]

    @classmethod
    def of(cls, profile: str, tables: dict[str, list[dict]]) -> ProfileRows:
        mine = {name: [r for r in rows if r["profile"] == profile] for name, rows in tables.items()}
        nvtx = mine["nvtx_ranges"]
        steps = [row for row in nvtx if row["kind"] == "step"]
        on_gpu = bool(mine["memops"] or mine["kernels"] or mine["gpu_steps"])
        return cls(
            tables=mine,
            calls=[row for row in nvtx if row["kind"] == "call"],
            steps=steps,
            on_gpu=on_gpu,
            # A GPU step's host thread never blocks inside it (the waits are stream events on
            # the device), so a host wait share would read 0 % and explain nothing.
            has_waits=not on_gpu and any(row["wait_ns"] is not None for row in steps),
            per_phase={phase: calls_by_nodes(steps, phase) for phase in PHASES},
        )

    @property
    def calls_total(self) -> int:
        return sum(int(row["count"]) for row in self.calls)

    def nodes_seen(self) -> list[int] | None:
        """Every node count the step ranges show, or None when they fit no mix of them."""
        found = [self.per_phase[p] for p in PHASES]
        if any(f is None for f in found):
            return None
        return sorted({n for f in found if f is not None for n in f})


def _ranges_section(
    p: ProfileRows, title: str, rows: list[dict], name: tuple[str, str, str]
) -> list[str]:
    """NVTX ranges with their times; ``name`` is (first header, its column, count header)."""
    if not rows:
        return []
    first, column, count = name
    wait = ["wait share"] if p.has_waits else []
    header = [first, count, "total (µs)", "median (µs)", "min (µs)", "max (µs)", *wait]
    cells = [
        [row[column], row["count"], us(row["total_ns"]), us(row["median_ns"]),
         us(row["min_ns"]), us(row["max_ns"])]
        + ([pct(row["wait_share"])] if p.has_waits else [])
        for row in rows
    ]  # fmt: skip
    return [title, "", *table(header, cells)]


def _calls(p: ProfileRows) -> list[str]:
    title = "### Collective calls (outer NVTX ranges)"
    return _ranges_section(p, title, p.calls, ("collective", "phase", "calls"))


def _node_counts(p: ProfileRows) -> list[str]:
    if not p.steps:
        return []
    out = ["### Steps per call, N = 2 vs N = 4 (from the step ranges)", ""]
    rows: list[list] = []
    for phase in PHASES:
        found = p.per_phase[phase]
        if found is None:
            rows.append([phase, "counts fit no mix of node counts", "", "", ""])
            continue
        for nodes, count in sorted(found.items()):
            rows.append([phase, nodes, count, nodes - 1, nodes * (nodes - 1)])
    out += table(["phase", "N", "calls", "steps per node per call", "step ranges per call"], rows)
    nodes_seen = p.nodes_seen()
    if nodes_seen is not None:
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
    return out


def _steps(p: ProfileRows) -> list[str]:
    if not p.steps:
        return []
    grouped: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for row in p.steps:
        grouped[(row["phase"], int(row["step"]))].append(row)
    rows = []
    for (phase, step), group in sorted(
        grouped.items(), key=lambda item: (PHASES.index(item[0][0]), item[0][1])
    ):
        total = sum(r["total_ns"] for r in group)
        count = sum(int(r["count"]) for r in group)
        line = [phase, step, len(group), count, us(total), us(total / count if count else 0)]
        if p.has_waits:
            wait = sum(r["wait_ns"] or 0 for r in group)
            line += [us(wait), pct(wait / total if total else 0)]
        rows.append(line)
    return [
        "### Steps (all nodes together)",
        "",
        *table(
            ["phase", "step", "nodes", "ranges", "total (µs)", "mean (µs)"]
            + (["waiting (µs)", "wait share"] if p.has_waits else []),
            rows,
        ),
        *_step_waits(p),
    ]


def _step_waits(p: ProfileRows) -> list[str]:
    """How much of the steps' time went to blocking calls, in all and per function."""
    if not p.has_waits:
        return []
    total = sum(r["total_ns"] for r in p.steps)
    wait = sum(r["wait_ns"] or 0 for r in p.steps)
    out = [
        f"Wait share over all steps: {pct(wait / total if total else 0)} of "
        f"{us(total)} µs spent in steps was spent blocked in synchronisation "
        "primitives (left-neighbour signals, barriers, the GIL).",
        "",
    ]
    by_function: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in p.tables["waits"]:
        if row["step"] != "":
            by_function[row["function"]][0] += int(row["calls"])
            by_function[row["function"]][1] += int(row["wait_ns"])
    if by_function:
        out += table(
            ["blocking call inside steps", "calls", "waiting (µs)", "share of step time"],
            [
                [fn, calls, us(ns), pct(ns / total if total else 0)]
                for fn, (calls, ns) in sorted(by_function.items(), key=lambda i: -i[1][1])
            ],
        )
    return out


def _step_ranges(p: ProfileRows) -> list[str]:
    return _ranges_section(p, "### Step ranges by node", p.steps, ("range", "range", "count"))


def _gpu(p: ProfileRows) -> list[str]:
    """The device's side of the steps, from the GPU trace (ring.nsys.gputrace)."""
    steps, transfers = p.tables["gpu_steps"], p.tables["gpu_transfers"]
    streams = p.tables["gpu_streams"]
    out: list[str] = []
    if p.on_gpu:
        out += [
            "Step ranges above are the host enqueueing each step's copy or kernel; the GPU "
            "waits for its neighbour on the device (CUDA events), so no host wait share is "
            "shown." + ("" if steps else " The GPU trace reports were not given, so the "
                        "device time per step is not known here."),
            "",
        ]  # fmt: skip
    if steps:
        out += ["### Steps on the device (GPU trace)", ""]
        out += table(
            ["phase", "step", "node", "calls", "GPU ops", "device median (µs)",
             "idle before (median µs)"],
            [
                [r["phase"], r["step"], r["node"], r["count"], r["ops"],
                 us(r["device_median_ns"]),
                 "" if r["gap_median_ns"] is None else us(r["gap_median_ns"])]
                for r in steps
            ],
        )  # fmt: skip
        device = sum(r["device_total_ns"] for r in steps)
        idle = sum(r["gap_total_ns"] or 0 for r in steps)
        if device + idle:
            out += [
                f"On the device, steps ran {us(device)} µs and their streams sat idle "
                f"{us(idle)} µs before them ({pct(idle / (device + idle))} idle): "
                + ("the host, not the GPU, sets the pace." if idle > device else
                   "the GPU work, not the host, sets the pace."),
                "",
            ]  # fmt: skip
    if transfers:
        out += ["### Transfers per call (GPU trace, inside the calls)", ""]
        out += table(
            ["N", "kind", "calls", "transfers", "per call"],
            [[r["nodes"], r["kind"], r["calls"], r["transfers"], f"{r['per_call']:.2f}"]
             for r in transfers],
        )  # fmt: skip
    if streams:
        out += ["### Device streams during the calls (GPU trace)", ""]
        out += table(
            ["device", "stream", "ops", "kernels", "copies", "busy (µs)", "idle (µs)"],
            [[r["device"], r["stream"], r["ops"], r["kernels"], r["copies"], us(r["busy_ns"]),
              us(r["idle_ns"])] for r in streams],
        )  # fmt: skip
    return out


def _other_ranges(p: ProfileRows) -> list[str]:
    others = [row for row in p.tables["nvtx_ranges"] if row["kind"] == "other"]
    if not others:
        return []
    return [
        "### Other NVTX ranges",
        "",
        *table(
            ["range", "count", "total (µs)", "median (µs)"],
            [[r["range"], r["count"], us(r["total_ns"]), us(r["median_ns"])] for r in others],
        ),
    ]


def _memops(p: ProfileRows) -> list[str]:
    memops = p.tables["memops"]
    if not memops:
        return []
    out = ["### GPU memory operations", ""]
    out += table(
        ["operation", "kind", "count", "total (µs)", "median (µs)", "total (MB)",
         "per copy (MB)"],
        [
            [r["operation"], r["kind"], r["count"], us(r["total_ns"]), us(r["median_ns"]),
             mb(r["total_bytes"]), mb(r["avg_bytes"])]
            for r in memops
        ],
    )  # fmt: skip
    peer = sum(int(r["count"]) for r in memops if r["kind"] == "peer_to_peer")
    lines = [f"- Peer-to-peer copies: {peer}."]
    if p.calls_total:
        lines.append(
            f"- Transfers per call: {peer / p.calls_total:.2f} peer-to-peer copies per "
            f"collective call ({p.calls_total} calls)."
        )
    expected = _chunks_moved(p)
    if expected is not None:
        lines.append(
            f"- The ring schedule moves {expected} chunks for these calls "
            f"(N (N - 1) per phase per call); peer-to-peer copies counted: {peer}."
        )
    return [*out, *lines, ""]


def _chunks_moved(p: ProfileRows) -> int | None:
    """Chunk transfers the schedule makes for the calls seen: N (N - 1) per phase per call."""
    if not p.calls:
        return None
    total = 0
    for phase in PHASES:
        found = p.per_phase[phase]
        if found is None:
            return None
        total += sum(n * (n - 1) * c for n, c in found.items())
    return total


def _kernels(p: ProfileRows) -> list[str]:
    kernels = p.tables["kernels"]
    if not kernels:
        return []
    merged: dict[str, list] = {}
    for r in kernels:
        entry = merged.setdefault(r["name"], [0, 0, 0])
        entry[0] += int(r["count"])
        entry[1] += r["total_ns"]
        entry[2] += 1
    calls_total = p.calls_total
    out = ["### GPU kernels", ""]
    out += table(
        ["kernel", "count", "total (µs)", "mean (µs)"] + (["per call"] if calls_total else []),
        [
            [name, count, us(total), us(total / count if count else 0)]
            + ([f"{count / calls_total:.2f}"] if calls_total else [])
            for name, (count, total, _) in sorted(merged.items(), key=lambda i: -i[1][1])
        ],
    )
    if any(r["grid_xyz"] for r in kernels):
        out += ["(nsys 2022 splits kernels by grid and block size; see kernels.csv.)", ""]
    return out


def _osrt(p: ProfileRows) -> list[str]:
    osrt = p.tables["osrt"]
    if not osrt:
        return []
    sync = [r for r in osrt if r["sync_wait"]]
    out = ["### OS runtime: blocking synchronisation calls (whole run, all threads)", ""]
    if sync:
        out += table(
            ["function", "calls", "total (µs)", "median (µs)", "max (µs)"],
            [[r["function"], r["count"], us(r["total_ns"]), us(r["median_ns"]),
              us(r["max_ns"])] for r in sync],
        )  # fmt: skip
    else:
        out += ["No blocking synchronisation calls were traced.", ""]
    if sync and not p.has_waits:
        out += [
            "These totals include threads idling between calls; the per-step wait "
            "share needs the ring_waits report (ring.nsys.export_stats writes it).",
            "",
        ]
    return out


SECTIONS: tuple[Callable[[ProfileRows], list[str]], ...] = (
    _calls, _node_counts, _steps, _step_ranges, _gpu, _other_ranges, _memops, _kernels, _osrt,
)  # fmt: skip


def profile_section(profile: str, tables: dict[str, list[dict]]) -> list[str]:
    """The Markdown lines of one profile, its sections in :data:`SECTIONS` order."""
    rows = ProfileRows.of(profile, tables)
    out = [f"## Profile `{profile}`", ""]
    for section in SECTIONS:
        out += section(rows)
    if len(out) == 2:
        out += ["No report of this profile had data.", ""]
    return out
