"""This build's tables, formatted once for both pages: the confirmations size by size and
launch by launch, nccl-tests' tables, the original study's size, the screens, the ceilings
and their drift, the alternated launches, and what was not measured."""

from __future__ import annotations

import math

import pandas as pd

from ..derive.confirmed import Confirmation
from ..derive.nccl import NcclTable
from ..derive.original import published
from ..derive.series import is_peer, label
from .fmt import format_bytes, format_number, format_ratio
from .table import Table

__all__ = [
    "alternated_table",
    "ceiling_table",
    "confirmation_table",
    "drift_table",
    "kernel_table",
    "launch_table",
    "nccl_text",
    "not_measured_table",
    "original_table",
    "screen_table",
]


def _shares(shares: dict[str, float] | None) -> str:
    if not shares:
        return "no fit"
    terms = ("alpha", "beta", "gamma", "per_node")
    return " / ".join(f"{format_number(100 * shares[k], 2)}" for k in terms)


def confirmation_table(c: Confirmation, step: int = 1) -> Table:
    """Each size of a confirmation: the pick, its family, the fastest peer, the ratio and
    its range over launches (``step``: every step-th size)."""
    rows = []
    for point in c.points[::step]:
        others = [label(r) for r in point.family[1:]]
        if point.ratio is None:
            ratio, low_high, launches = "set aside", point.aside, "–"
        else:
            ratio = format_ratio(point.ratio.point)
            low_high = f"{format_ratio(point.ratio.low)}–{format_ratio(point.ratio.high)}"
            launches = str(point.ratio.launches)
        rows.append(
            [
                format_bytes(point.bytes),
                label(point.pick),
                ", ".join(others) or "–",
                label(point.peer),
                format_number(point.pick_us),
                format_number(point.peer_us),
                ratio,
                low_high,
                launches,
                _shares(point.shares),
                "–" if point.model_error is None else format_ratio(point.model_error),
            ]
        )
    every = "" if step == 1 else f"; one size in {step} (every size: the appendix)"
    return Table(
        f"{c.kind}, N = {c.nodes}: the screen's pick against the fastest peer "
        f"(`{c.name}`, {c.launches} launches)",
        [
            "size",
            "ours (the screen's pick)",
            "as fast in some launch",
            "fastest peer",
            "ours (µs, median launch)",
            "peer (µs)",
            "peer / ours",
            "range over launches",
            "launches",
            "α / β / γ / buffers (%)",
            "model / measured",
        ],
        rows,
        "Times: the median launch's (the launch whose ratio is the median; the lower of the "
        "two middle ones where the launches kept are even in number). Above 1× ours is faster. "
        "α / β / γ / buffers: the fitted model's shares of the pick's time in steps, moving "
        f"bytes, reducing them and (inline) each node's buffer{every}.",
    )


def launch_table(c: Confirmation) -> Table:
    """Every launch's ratio at every size, with what was set aside."""
    launches = sorted({k for p in c.points for k in p.launch_ratios})
    rows = []
    for point in c.points:
        cells = []
        for k in launches:
            value = point.launch_ratios.get(k)
            text = "–" if value is None else format_ratio(value)
            cells.append(f"{text} (set aside)" if k in point.outliers else text)
        rows.append([format_bytes(point.bytes), *cells, point.aside or "–"])
    header = [f"launch {k} ({c.orders.get(k, '')}, drift {_drift(c, k)})" for k in launches]
    return Table(
        f"{c.kind}, N = {c.nodes}: peer / ours in each launch (`{c.name}`)",
        ["size", *header, "size set aside"],
        rows,
        "Each launch's ratio of medians; drift: how far that launch's memory ceilings moved "
        "between its start and its end.",
    )


def _drift(c: Confirmation, launch: int) -> str:
    value = c.drift.get(launch)
    return "n/a" if value is None else f"{format_number(100 * value, 2)} %"


def _fixed(value: float, decimals: int) -> str:
    """A number as nccl-tests prints it (``%.2f``), N/A where it is missing."""
    return "N/A" if value is None or math.isnan(value) else f"{value:.{decimals}f}"


def nccl_text(table: NcclTable) -> str:
    """The table as ``all_reduce_perf`` prints it, one line per size, with its header and
    its ``# Avg bus bandwidth`` line."""
    lines = [
        f"# {table.title} ({table.run})",
        f"# iterations {table.iters}, warm-up iterations {table.warmup}; time: {table.timing}",
        "#" + " " * 39 + "out-of-place" + " " * 27 + "in-place",
        "#       size      count    type  redop       time   algbw   busbw #wrong"
        "       time   algbw   busbw #wrong" + ("   rank min/avg/max (us)" if table.ranks else ""),
        "#        (B) (elements)                      (us)  (GB/s)  (GB/s)       "
        "       (us)  (GB/s)  (GB/s)",
    ]
    for r in table.rows.to_dict("records"):
        groups = ""
        for side in ("oop", "ip"):
            wrong = r[f"{side}_wrong"]
            wrong = "N/A" if math.isnan(wrong) else str(int(wrong))
            groups += (
                f"  {_fixed(r[f'{side}_time_us'], 1):>9}  {_fixed(r[f'{side}_algbw_GBps'], 2):>6}"
                f"  {_fixed(r[f'{side}_busbw_GBps'], 2):>6} {wrong:>6}"
            )
        ranks = ""
        if table.ranks:
            ranks = "   " + "/".join(
                _fixed(r[k], 1)
                for k in ("rank_mean_us_min", "rank_mean_us_avg", "rank_mean_us_max")
            )
        lines.append(
            f"{r['bytes']:>12} {r['count']:>10} {r['type']:>7} {r['redop']:>6}{groups}{ranks}"
        )
    average = "N/A" if table.avg_busbw is None else format(table.avg_busbw, ".6g")
    lines += [
        "# Out of bounds values : 0 OK" if _no_wrong(table) else "# Out of bounds values : FAILED",
        f"# Avg bus bandwidth    : {average}",
        "#",
    ]
    return "\n".join(lines)


def _no_wrong(table: NcclTable) -> bool:
    wrong = pd.concat([table.rows["oop_wrong"], table.rows["ip_wrong"]]).dropna()
    return bool((wrong == 0).all())


def original_table(model) -> Table:
    """The original study's published CPU figure, then this build's runs at that size."""
    rows = []
    for paper in published():
        if paper.backend != "cpu":
            continue
        rows.append(
            [
                f"the original study (published): {paper.what}",
                paper.machine,
                str(paper.nodes),
                format_bytes(paper.bytes),
                f"{paper.time_ms:g}" if paper.time_ms else "–",
                format_number(paper.busbw) if paper.busbw else "–",
                paper.source,
            ]
        )
    for row in model.original_rows.to_dict("records"):
        over = " (oversubscribed)" if row["per_core"] > 1 else ""
        rows.append(
            [
                f"this build: {row['label']}{over}",
                model.machine,
                str(row["nodes"]),
                format_bytes(int(row["bytes"])),
                format_number(row["time_us"] / 1e3),
                format_number(row["busbw_GBps"]),
                f"`{row['run']}` ({row['iters']} timed calls, median)",
            ]
        )
    return Table(
        "The original study at its own size",
        ["ring", "machine", "N", "size", "time (ms)", "busbw (GB/s)", "source"],
        rows,
        "The original's figure is quoted from its README; this build's are medians of a few "
        "calls in one launch per N. Different machines: set side by side, never divided. "
        "seed-cpp is the original's CPU design (a thread per node spawned per call, a "
        "barrier after every step) rewritten here and compiled with -O3.",
    )


def screen_table(run, every: int = 1) -> Table:
    """A screen size by size: its pick, the runner-up, and the fastest peer (one launch)."""
    rows = run.rows
    body = []
    for nbytes, part in sorted(rows.groupby("bytes"), key=lambda item: item[0])[::every]:
        records = part.sort_values("time_us").to_dict("records")
        ours = [r for r in records if not is_peer(r)]
        peers = [r for r in records if is_peer(r)]
        if not ours:
            continue
        body.append(
            [
                format_bytes(int(nbytes)),
                label(ours[0]),
                format_number(ours[0]["time_us"]),
                label(ours[1]) if len(ours) > 1 else "–",
                format_number(ours[1]["time_us"]) if len(ours) > 1 else "–",
                label(peers[0]) if peers else "–",
                format_number(peers[0]["time_us"]) if peers else "–",
                str(len(ours)),
            ]
        )
    first = rows.iloc[0]
    return Table(
        f"Screen {run.name}: {first['backend']}, N = {int(first['nodes'])}",
        ["size", "fastest of ours", "µs", "second", "µs", "fastest peer", "µs", "series of ours"],
        body,
        "One launch: a ranking that picks the finalists, not a finding (the confirmation "
        "tables judge the picks in other launches).",
    )


def drift_table(model) -> Table:
    rows = []
    for run in model.inputs.every_run():
        detail = run.ceilings.get("host_memory") or {}
        start, end = detail.get("start") or {}, detail.get("end") or {}
        rows.append(
            [
                f"`{run.name}`",
                run.meta.get("start_time") or "–",
                format_number(start.get("add_GBps", math.nan)),
                format_number(end.get("add_GBps", math.nan)),
                "n/a"
                if run.name not in model.drifts
                else f"{format_number(100 * model.drifts[run.name], 2)} %",
            ]
        )
    return Table(
        "Memory ceilings at each run's start and end",
        ["run", "started", "add at start (GB/s)", "add at end (GB/s)", "drift (largest kernel)"],
        rows,
        "STREAM-like kernels over 4× the last-level cache, one pinned thread per core, best of "
        "7 trials, before and after each run: an independent measure of the machine's state.",
    )


def _share_at(fraction: float, nbytes: int) -> str:
    return f"{format_number(100 * fraction)} % at {format_bytes(nbytes)}"


def ceiling_table(model) -> Table:
    rows = []
    for r in model.ceiling_fractions.itertuples():
        beyond = r.max_fraction_beyond_llc
        rows.append(
            [
                r.series,
                str(r.nodes),
                f"`{r.run}`",
                r.ceiling,
                format_number(r.ceiling_GBps),
                _share_at(r.fraction_at_largest, r.largest_bytes),
                "–"
                if beyond is None or pd.isna(beyond)
                else _share_at(beyond, int(r.beyond_llc_at_bytes)),
            ]
        )
    return Table(
        "How much of its run's memory ceiling each series reached",
        ["series", "N", "run", "ceiling", "GB/s", "at the largest size", "best beyond 4× LLC"],
        rows,
        "Memory traffic of the schedule per second over the run's best host memory kernel. "
        "Below 4× the last-level cache a cache serves part of the traffic; above 100 % beyond "
        "it, the series and the ceiling met different load.",
    )


def alternated_table(model) -> Table:
    rows = []
    for result in model.inputs.alternated:
        for r in result.rows.itertuples():
            reading = (
                f"{r.ours} faster in every round"
                if r.ratio_min > 1
                else f"{r.peer} faster in every round"
                if r.ratio_max < 1
                else "rounds disagree"
            )
            rows.append(
                [
                    r.ours,
                    r.peer,
                    str(r.nodes),
                    format_bytes(int(r.bytes)),
                    format_ratio(r.ratio),
                    f"{format_ratio(r.ratio_min)}–{format_ratio(r.ratio_max)}",
                    str(r.rounds),
                    reading,
                    f"`{result.name}`",
                ]
            )
    return Table(
        "The threaded ring against MPI_Allreduce, in alternated launches",
        [
            "ours",
            "peer",
            "N",
            "size",
            "time(peer) / time(ours)",
            "range over rounds",
            "rounds",
            "reading",
            "run",
        ],
        rows,
        "They cannot share a launch, so their launches alternate (A B B A ...); the ratio is "
        "the median over rounds.",
    )


def kernel_table(model) -> Table:
    """This build's reduction-kernel sweeps against the device copy of the same run."""
    rows = [
        [
            f"`{r.run}`",
            r.device or "–",
            r.kernel,
            format_bytes(r.largest_bytes),
            format_number(r.kernel_GBps),
            format_number(r.copy_GBps),
            format_number(100 * r.ratio_at_largest) + " %",
            f"{format_number(100 * r.max_ratio)} % at {format_bytes(r.max_at_bytes)}",
        ]
        for r in model.kernel_summary.itertuples()
    ]
    return Table(
        "Reduction kernel against the device copy (one GPU)",
        ["run", "device", "kernel", "largest size", "kernel (GB/s)", "copy (GB/s)",
         "kernel / copy", "best"],
        rows,
        "Two reads and one write per element against the device-to-device copy measured in "
        "the same run: not a ring measurement.",
    )  # fmt: skip


def not_measured_table(model) -> Table:
    return Table(
        "Not measured",
        ["what", "why", "command"],
        [
            [m.what, m.why + (f" ({m.where})" if m.where else ""), f"`{m.command}`"]
            for m in model.not_measured
        ],
        "",
    )
