"""nccl-tests' per-size table of each backend and N: what ``all_reduce_perf`` prints, from
this build's sweeps, out of place and in place, with #wrong and (under MPI) each rank's
mean time at its minimum, average and maximum over the ranks (OSU's ``-f``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from ...bench.nccl_compat import nccl_type_name
from ...bench.schema import SERIES_KEYS
from ..load import Run
from .series import is_peer, name

__all__ = ["NcclTable", "nccl_tables"]

# The timing each harness mode stands for, from the run's -a (ring.bench.nccl_compat).
_ACROSS_RANKS = {
    0: "rank 0's",
    1: "the average over ranks of",
    2: "the fastest rank's",
    3: "the slowest rank's",
}


@dataclass(frozen=True)
class NcclTable:
    """One series of one run: its rows (every size), and how they were timed."""

    title: str
    run: str
    backend: str
    nodes: int
    rows: pd.DataFrame  # size, count, type, redop, oop_*, ip_*, rank_*
    iters: int
    warmup: int
    timing: str
    avg_busbw: float | None
    ranks: bool  # whether it has min/avg/max over ranks
    out_of_place: bool
    plain: bool  # our plain ring (not a peer)
    sync: str


def _timing(run: Run, backend: str) -> str:
    config = run.meta.get("config") or {}
    if backend in ("mpi", "mpi-allreduce"):
        across = _ACROSS_RANKS.get(int(config.get("average", 1)), "the average over ranks of")
        return (
            f"the median over calls of {across} time per call (host clock, "
            "`time.perf_counter`, a barrier before each call)"
        )
    return "the median over calls of each call's time (host clock, `time.perf_counter`)"


def _value(row, column: str) -> float:
    value = row.get(column)
    return math.nan if value is None or pd.isna(value) else float(value)


def _table(run: Run, part: pd.DataFrame) -> NcclTable:
    first = part.iloc[0].to_dict()
    out_of_place = "oop_time_us" in part and part["oop_time_us"].notna().any()
    ranks = "rank_mean_us_min" in part and part["rank_mean_us_min"].notna().any()
    body = []
    for row in part.sort_values("bytes").to_dict("records"):
        body.append(
            {
                "bytes": int(row["bytes"]),
                "count": int(row["count"]),
                "type": nccl_type_name(row["dtype"]),
                "redop": row["op"],
                **{f"oop_{k}": _value(row, f"oop_{k}") for k in _GROUP},
                **{f"ip_{k}": _value(row, k) for k in _GROUP},
                **{k: _value(row, k) for k in _RANKS},
            }
        )
    rows = pd.DataFrame(body)
    busbw = [v for c in ("oop_busbw_GBps", "ip_busbw_GBps") for v in rows[c] if not math.isnan(v)]
    config = run.meta.get("config") or {}
    return NcclTable(
        title=f"{name(first)}, N = {int(first['nodes'])}",
        run=run.name,
        backend=str(first["backend"]),
        nodes=int(first["nodes"]),
        rows=rows,
        iters=int(config.get("iters") or first.get("iters") or 0),
        warmup=int(config.get("warmup") or 0),
        timing=_timing(run, str(first["backend"])),
        avg_busbw=sum(busbw) / len(busbw) if busbw else None,
        ranks=bool(ranks),
        out_of_place=bool(out_of_place),
        plain=not is_peer(first),
        sync=str(first["sync"]),
    )


_GROUP = ("time_us", "algbw_GBps", "busbw_GBps", "wrong")
_RANKS = ("rank_mean_us_min", "rank_mean_us_avg", "rank_mean_us_max")


def nccl_tables(runs: list[Run]) -> list[NcclTable]:
    """One table per series of the plain ring and of each peer, per run, in the runs' order:
    the runs that timed both groups (the sweeps) first."""
    tables = []
    for run in runs:
        rows = run.rows
        plain = rows[(rows["algorithm"] == "ring") | rows.apply(is_peer, axis=1)]
        keys = [*SERIES_KEYS, "nodes", "dtype", "op"]
        for _, part in plain.groupby(keys, sort=False):
            tables.append(_table(run, part))
    return sorted(tables, key=lambda t: (not t.out_of_place, t.nodes))
