"""Derived tables: series labels, speedups, scaling, ceilings reached, caveats.

Everything here is computed from the loaded result files; nothing is typed in.  A speedup of
A over B is ``time_B / time_A`` at the same size (and, unless a table says otherwise, the same
N), so a value above 1 means A is faster.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pandas as pd

from ..bench.algorithms import DEFAULT_ALGORITHM
from ..bench.results import busbw_factor
from ..cpu import INLINE_BYTES

__all__ = [
    "DEVICE_BACKENDS",
    "MPI_BACKENDS",
    "PEERS",
    "PLAIN",
    "RING_BACKENDS",
    "Comparison",
    "buffers_of",
    "busbw_at_largest",
    "compare",
    "executor_of",
    "label_series",
    "scaling",
    "summarise_comparison",
    "without_slices_traffic",
]

# The algorithm a ring backend runs unless told otherwise: the plain ring, whose rows keep
# their backend's label.
PLAIN = DEFAULT_ALGORITHM
# Backends that execute this project's ring schedule.
RING_BACKENDS = ("cpu", "mpi", "gpu")
# What a user would pick instead of each ring, on the same hardware.
PEERS = {
    "cpu": ("numpy-direct", "seed-cpp", "mpi-allreduce", "mpi"),
    "mpi": ("mpi-allreduce",),
    "gpu": ("nccl",),
}
DEVICE_BACKENDS = ("gpu", "nccl")
MPI_BACKENDS = ("mpi", "mpi-allreduce")


def executor_of(rows: pd.DataFrame) -> pd.Series:
    """Each row's ``executor`` column: the cpu backend's "nodes" or "slices"
    (ring.CpuCommunicator's), "" for the other backends."""
    return rows["executor"].astype(object).fillna("").astype(str)


def buffers_of(rows: pd.DataFrame) -> pd.Series:
    """Each row's ``buffers`` column: an MPI backend's "host", "device" or "shared"
    (``--buffers``), "" for the other backends."""
    return rows["buffers"].astype(object).fillna("").astype(str)


def without_slices_traffic(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows whose traffic rate the harness computed with the node threads' formula while
    the calls ran by slices (which move other bytes) get none."""
    slices = executor_of(rows) == "slices"
    if not slices.any() or "traffic_GBps" not in rows:
        return rows
    rows = rows.copy()
    rows.loc[slices, "traffic_GBps"] = math.nan
    return rows


def label_series(rows: pd.DataFrame) -> pd.DataFrame:
    """Add ``base`` (backend, sync, shared devices, dtype/op) and ``series`` (base + run).

    The run joins the label only where the same base was measured at the same N by more
    than one run (``mpi-allreduce`` as a peer in a CPU sweep and in an MPI sweep), so a reader
    can tell the lines apart; dtype and op join it only where the results hold more than one.
    """
    rows = rows.copy()
    several_kinds = len(rows[["dtype", "op"]].drop_duplicates()) > 1
    base = rows["backend"].astype(str)
    has_sync = ~rows["sync"].isin(["none", "", "nan"])
    base = base.where(~has_sync, base + " " + rows["sync"])
    # Threads always share one memory, so only GPU nodes on one device and MPI ranks on
    # one host say so in their label: there it tells a reader which hardware moved the data.
    on_device = rows["backend"].isin(DEVICE_BACKENDS)
    on_mpi = rows["backend"].isin(MPI_BACKENDS)
    base = base.where(~(rows["shared_devices"] & on_device), base + " (shared devices)")
    rows["one_host"] = on_mpi & _one_host(rows)
    base = base.where(~rows["one_host"], base + " (one host)")
    # The plain ring keeps its label; another algorithm names itself (a peer's rows carry
    # the peer's own name, which the label already says).
    other = (rows["algorithm"] != PLAIN) & (rows["algorithm"] != rows["backend"])
    base = base.where(~other, base + " " + rows["algorithm"])
    if "graphs" in rows:
        # Replayed CUDA graphs (ring.gpu.graphs); rows without the column enqueued eagerly.
        graphs = pd.to_numeric(rows["graphs"], errors="coerce").fillna(0) == 1
        base = base.where(~graphs, base + " (graphs)")
    if "inline_bytes" in rows:
        # cpu rows run with another --inline-bytes than the default (0: threads only).
        inline = pd.to_numeric(rows["inline_bytes"], errors="coerce")
        other = inline.notna() & (inline != INLINE_BYTES)
        named = base + " (inline_bytes=" + inline.fillna(0).astype("int64").astype(str) + ")"
        base = base.where(~other, named)
    # cpu rows run by position (--executor slices); the default (nodes) keeps its label.
    base = base.where(executor_of(rows) != "slices", base + " (slices)")
    # MPI rows on memory every rank maps (--buffers shared); host buffers keep their label.
    base = base.where(buffers_of(rows) != "shared", base + " (shared buffers)")
    if several_kinds:
        base = base + " " + rows["dtype"] + " " + rows["op"]
    if "machine" in rows:
        # A reference measured elsewhere always names its machine, so no figure or table
        # can pass it off as this run's.
        elsewhere = rows["machine"].fillna("").astype(str) != ""
        base = base.where(~elsewhere, base + " @ " + rows["machine"].astype(str))
    rows["base"] = base
    # A run per backend and N (the workflow's layout) is no repeat; two runs of the same
    # series at the same N are.
    runs_per_point = rows.groupby(["base", "nodes"])["run"].nunique()
    repeated_bases = set(runs_per_point[runs_per_point > 1].index.get_level_values("base"))
    repeated = rows["base"].isin(repeated_bases)
    rows["series"] = rows["base"].where(~repeated, rows["base"] + " [" + rows["run"] + "]")
    return rows


def _one_host(rows: pd.DataFrame) -> pd.Series:
    """Whether each row's MPI ranks shared one machine: the run's recorded host count; runs
    written before it was recorded said so in their shared_devices column."""
    hosts = rows["mpi_hosts"] if "mpi_hosts" in rows else pd.Series(math.nan, index=rows.index)
    return (hosts == 1) | (hosts.isna() & rows["shared_devices"])


@dataclass(frozen=True)
class Comparison:
    """Speedups of one group of series (``fast``) over another (``slow``), per size."""

    name: str
    title: str
    table: pd.DataFrame  # columns _PAIR_COLUMNS
    cross_nodes: bool  # some pairs compare different N


_PAIR_COLUMNS = [
    "fast",
    "slow",
    "nodes_fast",
    "nodes_slow",
    "run_fast",
    "run_slow",
    "bytes",
    "speedup",
    "low",
    "high",
]


def compare(
    name: str,
    title: str,
    fast: pd.DataFrame,
    slow: pd.DataFrame,
    *,
    allow_cross_nodes: bool = False,
) -> Comparison:
    """Pair every ``fast`` series with every ``slow`` series at the same size.

    Pairs come from the same run where the slow series was measured in that run (ratios of
    one run are immune to drift between runs).  With ``allow_cross_nodes``, a fast series at
    an N for which no slow series exists is compared with the slow series at every other N.
    """
    keys = ["dtype", "op", "bytes"]
    columns = [*keys, "series", "base", "run", "nodes", "time_us", "time_us_p25", "time_us_p75"]
    fast = fast[columns]
    slow = slow[columns]
    merged = fast.merge(slow, on=keys, suffixes=("_fast", "_slow"))
    merged = merged[merged["series_fast"] != merged["series_slow"]]
    same_n = merged[merged["nodes_fast"] == merged["nodes_slow"]]
    cross_nodes = False
    if allow_cross_nodes:
        with_partner = set(zip(same_n["series_fast"], same_n["nodes_fast"], strict=True))
        lonely = [
            (s, n) not in with_partner
            for s, n in zip(merged["series_fast"], merged["nodes_fast"], strict=True)
        ]
        extra = merged[pd.Series(lonely, index=merged.index, dtype=bool)]
        extra = extra[extra["nodes_fast"] != extra["nodes_slow"]]
        cross_nodes = not extra.empty
        merged = pd.concat([same_n, extra])
    else:
        merged = same_n
    if not merged.empty:
        group = ["series_fast", "nodes_fast", "base_slow"]
        same_run = merged["run_fast"] == merged["run_slow"]
        has_same_run = same_run.groupby([merged[g] for g in group]).transform("any")
        merged = merged[same_run | ~has_same_run]
    positive = (merged["time_us_fast"] > 0) & (merged["time_us_p25_fast"] > 0)
    merged = merged[positive]
    table = pd.DataFrame(
        {
            "fast": merged["series_fast"],
            "slow": merged["series_slow"],
            "nodes_fast": merged["nodes_fast"],
            "nodes_slow": merged["nodes_slow"],
            "run_fast": merged["run_fast"],
            "run_slow": merged["run_slow"],
            "bytes": merged["bytes"],
            "speedup": merged["time_us_slow"] / merged["time_us_fast"],
            # The band spans the interquartile ranges of both series.
            "low": merged["time_us_p25_slow"] / merged["time_us_p75_fast"],
            "high": merged["time_us_p75_slow"] / merged["time_us_p25_fast"],
        },
        columns=_PAIR_COLUMNS,
    )
    table = table.sort_values(["fast", "slow", "nodes_fast", "nodes_slow", "bytes"])
    return Comparison(name, title, table.reset_index(drop=True), cross_nodes)


def summarise_comparison(comparison: Comparison) -> pd.DataFrame:
    """Per pair: the largest and smallest speedup and where, and the one at the largest size."""
    records = []
    group = ["fast", "slow", "nodes_fast", "nodes_slow"]
    for (fast, slow, n_fast, n_slow), pair in comparison.table.groupby(group, sort=True):
        best = pair.loc[pair["speedup"].idxmax()]
        worst = pair.loc[pair["speedup"].idxmin()]
        last = pair.loc[pair["bytes"].idxmax()]
        records.append(
            {
                "fast": fast,
                "slow": slow,
                "nodes_fast": int(n_fast),
                "nodes_slow": int(n_slow),
                "max_speedup": float(best["speedup"]),
                "max_at_bytes": int(best["bytes"]),
                "min_speedup": float(worst["speedup"]),
                "min_at_bytes": int(worst["bytes"]),
                "largest_bytes": int(last["bytes"]),
                "speedup_at_largest": float(last["speedup"]),
            }
        )
    return pd.DataFrame.from_records(
        records,
        columns=[
            "fast",
            "slow",
            "nodes_fast",
            "nodes_slow",
            "max_speedup",
            "max_at_bytes",
            "min_speedup",
            "min_at_bytes",
            "largest_bytes",
            "speedup_at_largest",
        ],
    )


def comparisons(rows: pd.DataFrame) -> list[Comparison]:
    """Every comparison the data allows (an absent one is simply not in the list)."""
    found = []
    gpu = rows[rows["backend"] == "gpu"]
    cpu = rows[rows["backend"] == "cpu"]
    if not gpu.empty and not cpu.empty:
        found.append(
            compare(
                "gpu_vs_cpu",
                "GPU ring over CPU ring (wall-clock time)",
                gpu,
                cpu,
                allow_cross_nodes=True,
            )
        )
    for ring, peers in PEERS.items():
        ours = rows[rows["backend"] == ring]
        theirs = rows[rows["backend"].isin(peers)]
        if not ours.empty and not theirs.empty:
            found.append(compare(f"{ring}_vs_peers", f"{ring} ring over its peers", ours, theirs))
    # The two syncs of the node threads: calls run by slices wait for no other thread.
    threads = cpu[executor_of(cpu) == "nodes"]
    pairwise = threads[threads["sync"] == "pairwise"]
    barrier = threads[threads["sync"] == "barrier"]
    if not pairwise.empty and not barrier.empty:
        found.append(
            compare(
                "pairwise_vs_barrier",
                "cpu ring: pairwise over barrier synchronisation",
                pairwise,
                barrier,
            )
        )
    return [c for c in found if not c.table.empty]


def scaling(rows: pd.DataFrame) -> pd.DataFrame:
    """For each series measured at several N: time and busbw at N_b relative to N_a < N_b.

    Consecutive node counts are paired (2 with 4, 4 with 8).  ``busbw_factor_ratio`` is the
    ratio of the busbw factors 2(N−1)/N, the time ratio a link-bound ring would show.
    """
    records = []
    for series, group in rows[rows["nodes"] > 1].groupby("series", sort=True):
        counts = sorted(group["nodes"].unique())
        for n_a, n_b in itertools.pairwise(counts):
            a = group[group["nodes"] == n_a].set_index("bytes")
            b = group[group["nodes"] == n_b].set_index("bytes")
            common = a.index.intersection(b.index)
            common = common[(common > 0)]
            for size in common:
                t_a, t_b = a.at[size, "time_us"], b.at[size, "time_us"]
                bw_a, bw_b = a.at[size, "busbw_GBps"], b.at[size, "busbw_GBps"]
                records.append(
                    {
                        "series": series,
                        "nodes_a": int(n_a),
                        "nodes_b": int(n_b),
                        "bytes": int(size),
                        "time_ratio": t_b / t_a if t_a > 0 else math.nan,
                        "busbw_ratio": bw_b / bw_a if bw_a > 0 else math.nan,
                        "busbw_factor_ratio": busbw_factor(n_b) / busbw_factor(n_a),
                    }
                )
    columns = [
        "series",
        "nodes_a",
        "nodes_b",
        "bytes",
        "time_ratio",
        "busbw_ratio",
        "busbw_factor_ratio",
    ]
    return pd.DataFrame.from_records(records, columns=columns)


def busbw_at_largest(rows: pd.DataFrame) -> pd.DataFrame:
    """For each series and N: the row at its largest size."""
    index = rows.groupby(["series", "nodes"], sort=True)["bytes"].idxmax()
    largest = rows.loc[index.values]
    return largest[
        [
            "series",
            "backend",
            "run",
            "nodes",
            "bytes",
            "time_us",
            "algbw_GBps",
            "busbw_GBps",
            "traffic_GBps",
            "shared_devices",
        ]
    ].reset_index(drop=True)
