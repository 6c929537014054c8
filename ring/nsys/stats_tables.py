"""Parsed ``nsys stats`` reports -> the tidy tables of :data:`COLUMNS`.

The tables are lists of dicts with lower_snake_case columns, times in nanoseconds and
sizes in bytes; ``profile`` is the PREFIX's file name, so tables from several profiles can
be stacked.  NVTX range names are split into their ring meaning (call, step, node) here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from .gputrace import GPU_COLUMNS
from .names import memop_kind, split_range
from .stats_csv import NsysCsvError, Report
from .waits import is_sync_wait

__all__ = ["COLUMNS", "build_tables"]

COLUMNS: dict[str, list[str]] = {
    "nvtx_ranges": [
        "profile", "range", "domain", "kind", "phase", "step", "node", "rank", "style",
        "count", "total_ns", "avg_ns", "median_ns", "min_ns", "max_ns", "stddev_ns",
        "wait_ns", "wait_share",
    ],
    "memops": [
        "profile", "operation", "kind", "count", "total_ns", "avg_ns", "median_ns",
        "min_ns", "max_ns", "stddev_ns", "total_bytes", "avg_bytes", "median_bytes",
        "min_bytes", "max_bytes",
    ],
    "kernels": [
        "profile", "name", "grid_xyz", "block_xyz", "count", "total_ns", "avg_ns",
        "median_ns", "min_ns", "max_ns", "stddev_ns",
    ],
    "osrt": [
        "profile", "function", "sync_wait", "count", "total_ns", "avg_ns", "median_ns",
        "min_ns", "max_ns", "stddev_ns",
    ],
    "cuda_api": [
        "profile", "function", "count", "total_ns", "avg_ns", "median_ns", "min_ns",
        "max_ns", "stddev_ns",
    ],
    "waits": [
        "profile", "range", "phase", "step", "node", "rank", "function", "calls", "wait_ns",
    ],
    **GPU_COLUMNS,
}  # fmt: skip


def _stats(row: dict, unit: str = "ns") -> dict:
    return {
        f"{stat}_{unit}": row.get(f"{stat}_{unit}")
        for stat in ("avg", "median", "min", "max", "stddev")
    }


def build_tables(reports: Iterable[Report]) -> dict[str, list[dict]]:
    """The tidy tables of :data:`COLUMNS` from parsed reports (empty lists when no data)."""
    by_profile = _one_report_each(reports)
    tables: dict[str, list[dict]] = {name: [] for name in COLUMNS}
    for profile in sorted(by_profile):
        got = by_profile[profile]
        for name, rows_of in _TABLE_ROWS.items():
            tables[name].extend(rows_of(profile, got))
    _sort(tables)
    return tables


def _one_report_each(reports: Iterable[Report]) -> dict[str, dict[str, Report]]:
    """Profile -> logical report -> the one file with its rows (an empty twin is dropped)."""
    by_profile: dict[str, dict[str, Report]] = defaultdict(dict)
    for report in reports:
        seen = by_profile[report.profile].get(report.logical)
        if seen is not None and seen.rows and report.rows:
            raise NsysCsvError(
                f"{seen.path} and {report.path} are the same report of profile "
                f"{report.profile!r}; pass one of them"
            )
        if seen is None or not seen.rows:
            by_profile[report.profile][report.logical] = report
    return by_profile


def _rows(got: dict[str, Report], logical: str) -> list[dict]:
    report = got.get(logical)
    return report.rows if report is not None else []


def _wait_rows(profile: str, got: dict[str, Report]) -> list[dict]:
    return [
        {
            "profile": profile,
            "range": row["name"],
            **{k: v for k, v in split_range(row["name"]).items() if k not in ("domain", "kind")},
            "function": row["function"],
            "calls": row["count"],
            "wait_ns": row["wait_ns"],
        }
        for row in _rows(got, "ring_waits")
    ]


def _nvtx_rows(profile: str, got: dict[str, Report]) -> list[dict]:
    waits_by_range: dict[str, int] = defaultdict(int)
    for row in _rows(got, "ring_waits"):
        waits_by_range[row["name"]] += row["wait_ns"]
    have_waits = "ring_waits" in got
    nvtx_rows = _rows(got, "nvtx_sum")
    if not nvtx_rows:  # 2022's pushpop and startend summaries add up to nvtx_sum
        nvtx_rows = [dict(r, style="PushPop") for r in _rows(got, "nvtx_pushpop_sum")]
        nvtx_rows += [dict(r, style="StartEnd") for r in _rows(got, "nvtx_startend_sum")]
    out = []
    for row in nvtx_rows:
        wait = waits_by_range.get(row["name"], 0) if have_waits else None
        total = row["total_ns"]
        out.append(
            {
                "profile": profile,
                "range": row["name"],
                **split_range(row["name"]),
                "style": row.get("style", ""),
                "count": row["count"],
                "total_ns": total,
                **_stats(row),
                "wait_ns": wait,
                "wait_share": None if wait is None or not total else round(wait / total, 6),
            }
        )
    return out


def _memop_rows(profile: str, got: dict[str, Report]) -> list[dict]:
    sizes = {row["name"]: row for row in _rows(got, "cuda_gpu_mem_size_sum")}
    timed = _rows(got, "cuda_gpu_mem_time_sum")
    out = [
        {
            "profile": profile,
            "operation": row["name"],
            "kind": memop_kind(row["name"]),
            "count": row["count"],
            "total_ns": row["total_ns"],
            **_stats(row),
            **_bytes(sizes.get(row["name"], {})),
        }
        for row in timed
    ]
    timed_names = {row["name"] for row in timed}
    out += [
        {
            "profile": profile,
            "operation": name,
            "kind": memop_kind(name),
            "count": size["count"],
            **_bytes(size),
        }
        for name, size in sizes.items()
        if name not in timed_names
    ]
    return out


def _kernel_rows(profile: str, got: dict[str, Report]) -> list[dict]:
    return [
        {
            "profile": profile,
            "name": row["name"],
            "grid_xyz": row.get("grid_xyz", "").replace(" ", "x"),
            "block_xyz": row.get("block_xyz", "").replace(" ", "x"),
            "count": row["count"],
            "total_ns": row["total_ns"],
            **_stats(row),
        }
        for row in _rows(got, "cuda_gpu_kern_sum")
    ]


def _osrt_rows(profile: str, got: dict[str, Report]) -> list[dict]:
    return [
        {**row, "sync_wait": is_sync_wait(row["function"])}
        for row in _function_rows(profile, got, "osrt_sum")
    ]


def _cuda_api_rows(profile: str, got: dict[str, Report]) -> list[dict]:
    return _function_rows(profile, got, "cuda_api_sum")


def _function_rows(profile: str, got: dict[str, Report], logical: str) -> list[dict]:
    """One row per function of a function summary (CUDA API calls, OS runtime calls)."""
    return [
        {
            "profile": profile,
            "function": row["name"],
            "count": row["count"],
            "total_ns": row["total_ns"],
            **_stats(row),
        }
        for row in _rows(got, logical)
    ]


# Which summary table each report-built table comes from (the GPU trace tables are built
# in ring.nsys.gputrace).
_TABLE_ROWS: dict[str, Callable[[str, dict[str, Report]], list[dict]]] = {
    "waits": _wait_rows,
    "nvtx_ranges": _nvtx_rows,
    "memops": _memop_rows,
    "kernels": _kernel_rows,
    "osrt": _osrt_rows,
    "cuda_api": _cuda_api_rows,
}


def _bytes(size: dict) -> dict:
    def as_int(value):
        return None if value is None else round(value)

    return {
        "total_bytes": as_int(size.get("total_bytes")),
        **{f"{s}_bytes": as_int(size.get(f"{s}_bytes")) for s in ("avg", "median", "min", "max")},
    }


def _sort(tables: dict[str, list[dict]]) -> None:
    kinds = {"call": 0, "step": 1, "other": 2}
    phases = {"allreduce": 0, "reduce_scatter": 1, "all_gather": 2}

    def range_key(row):
        return (
            row["profile"],
            kinds[row["kind"]],
            phases.get(row["phase"], 3),
            row["step"] if row["step"] != "" else -1,
            row["node"] if row["node"] != "" else -1,
            row["rank"] if row["rank"] != "" else -1,
            row["range"],
        )

    tables["nvtx_ranges"].sort(key=range_key)
    tables["waits"].sort(
        key=lambda r: (
            range_key({**r, "kind": "step" if r["step"] != "" else "call"}),
            r["function"],
        )
    )
    for name in ("memops", "kernels", "osrt", "cuda_api"):
        tables[name].sort(key=lambda r: (r["profile"], -(r.get("total_ns") or 0)))
