"""What makes the harness a drop-in for nccl-tests' ``all_reduce_perf`` in users' scripts.

* Options: nccl-tests' long names (``--minbytes``, ``--maxbytes``, ``--stepbytes``,
  ``--stepfactor``, ``--iters``, ``--warmup_iters``, ``--check``, ``--op``, ``--datatype``,
  ``--average``, ``--timeout``) next to ours, ``-i`` (linear steps), ``-c N``, ``-d all``,
  ``-o all``, ``-a`` and ``-T``.
* The table: nccl-tests' columns ``size count type redop root``, then an out-of-place and
  an in-place group of ``time algbw busbw #wrong``.  Our collectives work in place, so the
  out-of-place group says ``N/A`` (not measured) in every field, as nccl-tests says ``N/A``
  for ``#wrong`` when it does not check; our own columns (traffic, spread) follow.
* The footer: ``# Out of bounds values : N OK|FAILED`` and ``# Avg bus bandwidth : %g``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = [
    "ALL_DTYPES",
    "AVERAGE_MODES",
    "NCCL_ROOT",
    "RANK_MEAN_COLUMNS",
    "TABLE_HEADER",
    "aggregate_ranks",
    "avg_busbw_line",
    "format_float",
    "linear_sizes",
    "out_of_bounds_line",
    "rank_mean_stats",
    "should_check",
    "table_line",
    "variants",
]

# nccl-tests' types that NumPy has (no bfloat16 or fp8), in its order.
ALL_DTYPES = (
    *("int8", "uint8", "int32", "uint32", "int64", "uint64"),
    *("float16", "float32", "float64"),
)
# -a: how one call's time is taken across ranks (nccl-tests: 0 rank 0, 1 avg, 2 min, 3 max).
AVERAGE_MODES = {0: "rank 0", 1: "average", 2: "minimum", 3: "maximum"}
# nccl-tests prints root -1 for collectives without a root, such as allreduce.
NCCL_ROOT = -1


def linear_sizes(min_bytes: int, max_bytes: int, step: int, itemsize: int) -> list[int]:
    """``-i``: sizes from ``min_bytes`` to ``max_bytes`` adding ``step`` bytes, each rounded
    down to whole elements, duplicates and empty sizes dropped."""
    sizes: list[int] = []
    for size in range(min_bytes, max_bytes + 1, step):
        rounded = size // itemsize * itemsize
        if rounded and (not sizes or rounded != sizes[-1]):
            sizes.append(rounded)
    return sizes


def should_check(every: int, call: int, calls: int) -> bool:
    """``-c N``: validate timed calls N, 2N, ... and always the last one; ``-c 0`` none."""
    return every > 0 and ((call + 1) % every == 0 or call == calls - 1)


def variants(config, sweep_sizes) -> list:
    """The configs of ``-d all`` / ``-o all``: one per (dtype, op), sizes rounded per dtype."""
    out = []
    for dtype in config.dtypes:
        sizes = sweep_sizes(dtype)
        for op in config.ops:
            out.append(dataclasses.replace(config, dtype=dtype, op=op, sizes=sizes))
    return out


def aggregate_ranks(times: np.ndarray, average: int) -> np.ndarray:
    """One time per call from a (ranks, calls) array, as ``-a`` says."""
    if average == 0:
        return times[0]
    if average == 1:
        return times.mean(axis=0)
    return times.min(axis=0) if average == 2 else times.max(axis=0)


# OSU's -f columns of an MPI backend's rows (microseconds).
RANK_MEAN_COLUMNS = ("rank_mean_us_min", "rank_mean_us_avg", "rank_mean_us_max")


def rank_mean_stats(times: np.ndarray) -> dict[str, float]:
    """OSU's ``-f`` statistics: min, average and max over ranks of each rank's mean time
    over the timed calls (``times`` is (ranks, calls), seconds), in microseconds."""
    means = np.mean(times, axis=1) * 1e6
    values = (np.min(means), np.mean(means), np.max(means))
    return {name: float(value) for name, value in zip(RANK_MEAN_COLUMNS, values, strict=True)}


TABLE_HEADER = "\n".join(
    [
        f"#{'':67}out-of-place{'':26}in-place",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}" * 2
        + f"  {'traffic':>7}  {'spread':>6}",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
        + f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}" * 2
        + f"  {'(GB/s)':>7}  {'(%)':>6}",
        "# out-of-place: not measured (N/A), every backend here reduces in place",
    ]
)


def format_float(value: float | None, width: int, digits: int = 2) -> str:
    """nccl-tests' getFloatStr: as many decimals (``digits``, then fewer) as fit in
    ``width``, else exponent form; ``N/A`` for a value not measured."""
    if value is None:
        return "N/A".rjust(width)
    for decimals in range(digits, -1, -1):
        text = f"{value:{width}.{decimals}f}"
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def table_line(row: dict) -> str:
    """One size in nccl-tests' layout (see the module docstring)."""
    spread = (
        100 * (row["time_us_p75"] - row["time_us_p25"]) / row["time_us"]
        if row["time_us"] > 0
        else None
    )
    wrong = "N/A" if row["wrong"] is None else f"{row['wrong']:g}"
    not_measured = f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
    return (
        f"{row['bytes']:>12}  {row['count']:>12}  {row['dtype']:>8}  {row['op']:>6}  "
        f"{NCCL_ROOT:>6}{not_measured}  {format_float(row['time_us'], 7)}  "
        f"{format_float(row['algbw_GBps'], 6)}  {format_float(row['busbw_GBps'], 6)}  {wrong:>6}  "
        f"{format_float(row['traffic_GBps'], 7)}  {format_float(spread, 6)}"
    )


def avg_busbw_line(rows: Sequence[dict]) -> str:
    """nccl-tests' ``# Avg bus bandwidth    : %g`` (GB/s), over the sizes of a block."""
    busbw = [row["busbw_GBps"] for row in rows if row["busbw_GBps"] is not None]
    value = f"{float(np.mean(busbw)):g}" if busbw else "N/A"
    return f"# {'Avg bus bandwidth':<20} : {value} "


def out_of_bounds_line(wrong_total: int | None) -> str:
    """nccl-tests' ``# Out of bounds values : N OK|FAILED``."""
    if wrong_total is None:
        return f"# {'Out of bounds values':<20} : N/A (not checked, -c 0)"
    return f"# {'Out of bounds values':<20} : {wrong_total} {'FAILED' if wrong_total else 'OK'}"
