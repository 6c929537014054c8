"""The report's headline: the tables of the findings, and the GPU/CPU speedup sentence."""

from __future__ import annotations

from .algorithms import fastest_table
from .best_of import best_of_table
from .fmt import format_bytes, format_fraction, format_number, format_ratio
from .model import ReportModel
from .table import Table
from .trust_tables import alternated_table, beyond_llc, one_run_table, scaling_table

__all__ = ["gpu_headline", "headline_tables"]


def headline_tables(model: ReportModel) -> list[Table]:
    """The tables shown first, in order; those the data does not allow are left out."""
    scaling = scaling_table(model)
    one_run = one_run_table(model)
    alternated = alternated_table(model)
    headline = [
        *([one_run] if one_run is not None else []),
        *([alternated] if alternated is not None else []),
        *_speedup_tables(model),
        _busbw_table(model),
        _ceiling_table(model),
    ]
    if scaling is not None:
        headline.append(scaling)
    waiting = _wait_table(model)
    if waiting is not None:
        headline.append(waiting)
    kernel = _kernel_table(model)
    if kernel is not None:
        headline.append(kernel)
    fastest = fastest_table(model)
    if fastest is not None:
        headline.append(fastest)
    best_of = best_of_table(model)
    if best_of is not None:
        headline.append(best_of)
    return headline


def _speedup_tables(model: ReportModel) -> list[Table]:
    tables = []
    # Speedup of A over B = time(B) / time(A): above 1× A is faster, below 1× B is.
    header = [
        "A",
        "B",
        "N",
        "largest speedup of A",
        "at",
        "smallest speedup of A",
        "at",
        "at the largest size",
    ]
    for comparison, summary in model.comparison_summaries:
        rows = []
        for r in summary.itertuples():
            nodes = (
                str(r.nodes_fast)
                if r.nodes_fast == r.nodes_slow
                else f"{r.nodes_fast} vs {r.nodes_slow}"
            )
            rows.append(
                [
                    r.fast,
                    r.slow,
                    nodes,
                    format_ratio(r.max_speedup),
                    format_bytes(r.max_at_bytes),
                    format_ratio(r.min_speedup),
                    format_bytes(r.min_at_bytes),
                    f"{format_ratio(r.speedup_at_largest)} ({format_bytes(r.largest_bytes)})",
                ]
            )
        note = "Speedup of A over B = time(B) / time(A): above 1× A is faster, below 1× B is."
        tables.append(Table(comparison.title, header, rows, note))
    return tables


def _busbw_table(model: ReportModel) -> Table:
    rows = [
        [
            r.series,
            str(r.nodes),
            format_bytes(r.bytes),
            format_number(r.time_us),
            format_number(r.algbw_GBps),
            format_number(r.busbw_GBps),
            format_number(r.traffic_GBps),
        ]
        for r in model.busbw_at_largest.itertuples()
    ]
    return Table(
        "Bandwidth at the largest size, per backend and N",
        ["series", "N", "size", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "traffic (GB/s)"],
        rows,
    )


def _ceiling_table(model: ReportModel) -> Table:
    rows = [
        [
            r.series,
            str(r.nodes),
            r.ceiling,
            format_number(r.ceiling_GBps),
            r.metric,
            format_bytes(r.largest_bytes),
            format_number(r.value_at_largest),
            format_fraction(r.fraction_at_largest),
            f"{format_fraction(r.max_fraction)} ({format_bytes(r.max_at_bytes)})",
            beyond_llc(r),
        ]
        for r in model.ceiling_fractions.itertuples()
    ]
    note = (
        "Each series against the ceilings measured in its own run: host backends against "
        "the fastest of the run's copy, add and triad kernels (STREAM-like, arrays of 4× the "
        "last-level cache, the better of the start and end measurements), GPU backends "
        "against device ones; link ceilings are compared with busbw, memory ceilings with "
        "the schedule's memory traffic, both counted as bytes crossing the memory bus. Only "
        "sizes of at least 4× the last-level cache compare with a memory ceiling: below it "
        "caches serve part of the traffic."
    )
    if not rows:
        note = "No run recorded a bandwidth ceiling that applies to its series."
    return Table(
        "Fraction of each ceiling reached",
        [
            "series",
            "N",
            "ceiling",
            "ceiling (GB/s)",
            "compared",
            "largest size",
            "value (GB/s)",
            "fraction",
            "highest fraction (at)",
            "highest at ≥ 4× LLC (at)",
        ],
        rows,
        note,
    )


def _kernel_table(model: ReportModel) -> Table | None:
    summary = model.kernel_summary
    if summary.empty:
        return None
    rows = [
        [
            r.run,
            r.device,
            r.kernel,
            format_bytes(r.largest_bytes),
            format_number(r.kernel_GBps),
            format_number(r.copy_GBps),
            format_fraction(r.ratio_at_largest),
            f"{format_fraction(r.max_ratio)} ({format_bytes(r.max_at_bytes)})",
        ]
        for r in summary.itertuples()
    ]
    return Table(
        "Reduction kernel against the device copy (one GPU)",
        ["run", "device", "kernel", "largest size", "kernel (GB/s)", "copy (GB/s)", "kernel / copy",
         "highest kernel / copy (at)"],
        rows,
        "Kernel: two reads and one write per element (ring: ours, ring.gpu.kernels; ufunc: "
        "CuPy's); copy: one read and one write, of the same bytes on the same device in the "
        "same run.",
    )  # fmt: skip


def _wait_table(model: ReportModel) -> Table | None:
    waits = model.profile_waits
    if waits is None or waits.empty:
        return None
    rows = [
        [
            r.profile,
            r.phase,
            format_number(r.total_ns / 1e3),
            format_number(r.wait_ns / 1e3),
            format_fraction(r.wait_share),
        ]
        for r in waits.itertuples()
    ]
    return Table(
        "Share of ring-step time spent waiting (Nsight Systems)",
        ["profile", "phase", "time in steps (µs)", "blocked in sync calls (µs)", "share"],
        rows,
        "All step ranges of all nodes together; waiting is the time a step's thread spent "
        "blocked in synchronisation calls, read from the trace.",
    )


def gpu_headline(model: ReportModel) -> str | None:
    """The study's headline sentence: the largest GPU/CPU speedup and where."""
    comparison = model.comparison("gpu_vs_cpu")
    if comparison is None:
        return None
    table = comparison.table
    best = table.loc[table["speedup"].idxmax()]
    fast = model.rows[
        (model.rows["series"] == best["fast"])
        & (model.rows["nodes"] == best["nodes_fast"])
        & (model.rows["bytes"] == best["bytes"])
    ].iloc[0]
    slow = model.rows[
        (model.rows["series"] == best["slow"])
        & (model.rows["nodes"] == best["nodes_slow"])
        & (model.rows["bytes"] == best["bytes"])
        & (model.rows["run"] == best["run_slow"])
    ].iloc[0]
    where = ""
    if fast["run"] != slow["run"]:
        machines = [m or "this machine" for m in (fast.get("machine", ""), slow.get("machine", ""))]
        where = (
            f" Two runs on two machines ({machines[0]}; {machines[1]}): the ratio compares the "
            "machines as well as the implementations."
            if machines[0] != machines[1]
            else f" Two runs ({fast['run']}; {slow['run']}) on one machine."
        )
    return (
        f"Largest GPU/CPU speedup: {format_ratio(best['speedup'])} at "
        f"{format_bytes(int(best['bytes']))} per node ({best['fast']} N={best['nodes_fast']}: "
        f"{format_number(fast['time_us'])} µs; {best['slow']} N={best['nodes_slow']}: "
        f"{format_number(slow['time_us'])} µs).{where}"
    )
