"""What makes the harness a drop-in for nccl-tests' ``all_reduce_perf`` in users' scripts.

* Options: nccl-tests' long names (``--minbytes``, ``--maxbytes``, ``--stepbytes``,
  ``--stepfactor``, ``--iters``, ``--warmup_iters``, ``--check``, ``--op``, ``--datatype``,
  ``--average``, ``--timeout``) next to ours, ``-i`` (linear steps), ``-c N``, ``-d all``,
  ``-o all``, ``-a`` and ``-T``.
* The header: ``# nThread 1 nGpus 1 minBytes ... validation: 1 graph: 0``, as
  all_reduce_perf prints it (src/util.cu), then the table's three header lines.
* The table: nccl-tests' columns ``size count type redop root`` (its type names: ``float``,
  ``double``, ``half``, ``int32``...), then an out-of-place and an in-place group of ``time
  algbw busbw #wrong``.  Out of place is the harness's: the library reduces in place, so
  an out-of-place call copies each node's send buffer into its receive buffer and reduces
  that, both inside the timed region (:meth:`ring.bench.backends.Session.timed_out_of_place`);
  a backend that cannot says ``N/A`` there.  Our own columns (traffic, spread, series) follow
  the 13 of nccl-tests, so its parsers' column positions hold.
* The footer: ``# Out of bounds values : N OK|FAILED`` and one ``# Avg bus bandwidth : %g``
  over every row of the run, out of place and in place, as nccl-tests averages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = [
    "ALL_DTYPES",
    "AVERAGE_MODES",
    "DEFAULT_AVERAGE",
    "NCCL_ROOT",
    "NCCL_TYPE_NAMES",
    "OOP_COLUMNS",
    "RANK_MEAN_COLUMNS",
    "TABLE_HEADER",
    "aggregate_ranks",
    "avg_busbw_line",
    "format_float",
    "linear_sizes",
    "nccl_header_line",
    "nccl_type_name",
    "out_of_bounds_line",
    "rank_mean_stats",
    "should_check",
    "table_header",
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
# nccl-tests' default -a: the average over ranks.
DEFAULT_AVERAGE = 1
# nccl-tests' names of the types it shares with NumPy (src/common.cu, test_typenames); a
# type it lacks (int16, complex64) keeps NumPy's name.
NCCL_TYPE_NAMES = {"float16": "half", "float32": "float", "float64": "double"}
# nccl-tests prints root -1 for collectives without a root, such as allreduce.
NCCL_ROOT = -1


def nccl_type_name(dtype) -> str:
    """The type column: nccl-tests' name (``float``, ``double``, ``half``, ``int32``...)."""
    name = np.dtype(dtype).name
    return NCCL_TYPE_NAMES.get(name, name)


def nccl_header_line(config, threads: int = 1, gpus: int = 1) -> str:
    """all_reduce_perf's first line (src/util.cu, writeDeviceReport), from this run's flags:
    ``step`` is ``-f`` (factor) or ``-i`` (bytes); ``graph`` is ``-G``; ``agg iters`` ``-m``."""
    flags = getattr(config, "nccl_flags", {}) or {}
    step = (
        f"{config.step_bytes}(bytes)"
        if config.step_bytes is not None
        else f"{config.step_factor:g}(factor)"
    )
    return (
        f"# nThread {threads} nGpus {gpus} minBytes {config.min_bytes} "
        f"maxBytes {config.max_bytes} step: {step} warmup iters: {config.warmup} "
        f"iters: {config.iters} agg iters: {flags.get('agg_iters', 1)} "
        f"validation: {int(config.check)} graph: {flags.get('cudagraph', 0)}"
    )


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


def table_header(time_label: str = "time") -> str:
    """nccl-tests' three header lines (src/util.cu, writeResultHeader), ``cputime`` for
    ``-C 1``, then our columns: traffic, spread and the series."""
    group = f"  {time_label:>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}"
    units = f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}"
    return "\n".join(
        [
            "#",
            f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}"
            f"           out-of-place                       in-place          ",
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
            + group * 2
            + f"  {'traffic':>7}  {'spread':>6}  series",
            f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
            + units * 2
            + f"  {'(GB/s)':>7}  {'(%)':>6}",
        ]
    )


TABLE_HEADER = table_header()


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


def _group(time_us, algbw, busbw, wrong) -> str:
    """One ``time algbw busbw #wrong`` group (nccl-tests' ``%6g`` or ``N/A`` for #wrong)."""
    wrong_text = "N/A" if wrong is None else f"{wrong:g}"
    return (
        f"  {format_float(time_us, 7)}  {format_float(algbw, 6)}  "
        f"{format_float(busbw, 6)}  {wrong_text:>6}"
    )


def table_line(row: dict, series: str = "") -> str:
    """One size in nccl-tests' layout (see the module docstring)."""
    spread = (
        100 * (row["time_us_p75"] - row["time_us_p25"]) / row["time_us"]
        if row["time_us"] > 0
        else None
    )
    out_of_place = _group(*(row.get(f"oop_{key}") for key in OOP_KEYS))
    in_place = _group(row["time_us"], row["algbw_GBps"], row["busbw_GBps"], row["wrong"])
    line = (
        f"{row['bytes']:>12}  {row['count']:>12}  {nccl_type_name(row['dtype']):>8}  "
        f"{row['op']:>6}  {NCCL_ROOT:>6}{out_of_place}{in_place}  "
        f"{format_float(row['traffic_GBps'], 7)}  {format_float(spread, 6)}"
    )
    return f"{line}  {series}" if series else line


# The out-of-place group's columns of a row (CSV ``oop_time_us`` ...), in the table's order.
OOP_KEYS = ("time_us", "algbw_GBps", "busbw_GBps", "wrong")
OOP_COLUMNS = tuple(f"oop_{key}" for key in OOP_KEYS)


def avg_busbw_line(rows: Sequence[dict]) -> str:
    """nccl-tests' ``# Avg bus bandwidth    : %g`` (GB/s): the mean busbw over every row
    given, out of place and in place (nccl-tests counts both)."""
    busbw = [
        row[key]
        for row in rows
        for key in ("oop_busbw_GBps", "busbw_GBps")
        if row.get(key) is not None
    ]
    value = f"{float(np.mean(busbw)):g}" if busbw else "N/A"
    return f"# {'Avg bus bandwidth':<20} : {value} "


def out_of_bounds_line(wrong_total: int | None) -> str:
    """nccl-tests' ``# Out of bounds values : N OK|FAILED``."""
    if wrong_total is None:
        return f"# {'Out of bounds values':<20} : N/A (not checked, -c 0)"
    return f"# {'Out of bounds values':<20} : {wrong_total} {'FAILED' if wrong_total else 'OK'}"
