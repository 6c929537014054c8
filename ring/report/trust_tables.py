"""The headline tables that say how far a number can be trusted: ratios from one run with
their intervals, ratios from alternated launches with their spread, the fraction of the
memory ceiling beyond the caches, and node-count scaling with oversubscribed points marked."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from . import alternation, intervals, trust
from .fmt import format_bytes, format_fraction, format_number, format_ratio
from .table import Table

if TYPE_CHECKING:
    from .model import ReportModel

__all__ = ["alternated_table", "beyond_llc", "one_run_table", "scaling_table"]


def one_run_table(model: ReportModel) -> Table | None:
    """The headline ratios: ours against each peer, one run, at the smallest and largest
    size, with the bootstrap interval over the timed calls."""
    ratios = model.one_run_ratios
    if ratios.empty:
        return None
    rows = []
    for _, pair in ratios.groupby(["ours", "peer", "nodes", "run"], sort=True):
        ends = pair.loc[[pair["bytes"].idxmin(), pair["bytes"].idxmax()]].drop_duplicates()
        for r in ends.itertuples():
            interval = (
                "n/a"
                if pd.isna(r.ci_low)
                else f"{format_ratio(r.ci_low)} – {format_ratio(r.ci_high)}"
            )
            rows.append(
                [
                    r.ours,
                    r.peer,
                    str(r.nodes),
                    format_bytes(r.bytes),
                    format_ratio(r.speedup),
                    interval,
                    intervals.verdict(r.ci_low, r.ci_high, r.ours, r.peer),
                    r.run,
                ]
            )
    return Table(
        "Our ring against its peers, each pair from one run",
        ["ours", "peer", "N", "size", "time(peer) / time(ours)", "95 % CI", "reading", "run"],
        rows,
        "Both series of a row were measured in one invocation, size by size in turn; the "
        f"interval is a percentile bootstrap ({intervals.DRAWS} draws) over their timed calls. "
        "Above 1× ours is faster.",
    )


def alternated_table(model: ReportModel) -> Table | None:
    rows = alternation.table_rows(model.alternated)
    if not rows:
        return None
    return Table(
        "Our threaded ring against MPI_Allreduce: separate launches, alternated",
        ["ours", "peer", "N", "size", "time(peer) / time(ours)", "over rounds", "rounds",
         "reading", "comparison"],
        rows,
        "These two cannot share a launch (one process against mpirun -n N), so this is not a "
        "one-run ratio: the launches alternated (A B B A ...) and the ratio is the median over "
        "rounds, with the smallest and largest round beside it.",
    )  # fmt: skip


def beyond_llc(r) -> str:
    if r.llc_bytes is None or pd.isna(r.llc_bytes):
        return "LLC not recorded"
    if r.max_fraction_beyond_llc is None or pd.isna(r.max_fraction_beyond_llc):
        return f"no size ≥ {format_bytes(4 * int(r.llc_bytes))}"
    return (
        f"{format_fraction(r.max_fraction_beyond_llc)} ({format_bytes(int(r.beyond_llc_at_bytes))})"
    )


def scaling_table(model: ReportModel) -> Table | None:
    table = model.scaling_at_largest
    if table.empty:
        return None
    over = trust.oversubscribed(model.rows)
    crowded = {(r.series, int(r.nodes)): r.threads_per_core for r in over.itertuples()}
    rows = []
    for r in table.itertuples():
        per_core = crowded.get((r.series, int(r.nodes_b)))
        rows.append(
            [
                r.series,
                f"{r.nodes_b} / {r.nodes_a}",
                format_bytes(r.bytes),
                format_ratio(r.time_ratio),
                format_ratio(r.busbw_ratio),
                format_ratio(r.busbw_factor_ratio),
                "yes: not algorithmic" if per_core is None else "",
                "" if per_core is None else f"{format_number(per_core)} per core",
            ]
        )
    for row in rows:
        if row[-1]:
            row[-2] = "no (more nodes than cores)"
    return Table(
        "Node-count scaling at the largest common size",
        [
            "series",
            "N ratio",
            "size",
            "time ratio",
            "busbw ratio",
            "busbw factor ratio",
            "read as the ring's scaling?",
            "oversubscribed at the larger N",
        ],
        rows,
        "A ring limited by its links takes the busbw factor ratio longer at the larger N "
        "(busbw ratio 1). Where the larger N ran more threads or ranks than cores, the "
        "extra time is the operating system time-slicing them, not per-step overhead of the "
        "ring.",
    )
