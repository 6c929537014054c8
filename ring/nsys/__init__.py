"""Nsight Systems profiles of the ring collectives, as tables.

The pipeline, one function per arrow (each usable from a workflow script)::

    profile_command(name, argv)  ->  nsys profile  ->  <root>/<name>/<name>.nsys-rep
    export_stats(rep, prefix)    ->  nsys stats    ->  <prefix>_<report>.csv (+ ring_waits)
    write_tables(csvs, out_dir)  ->  nvtx_ranges.csv, memops.csv, kernels.csv, osrt.csv ...
    write_summary(tables, md)    ->  summary.md

``require_nsys()`` / ``require_gpus(n)`` stop early with one line that says what is
missing and how to get it.  Command line: ``python -m ring.nsys --help``.
"""

from .names import REPORTS, memop_kind, split_range
from .summary import calls_by_nodes, render_summary, write_summary
from .tables import (
    COLUMNS,
    NsysCsvError,
    build_tables,
    read_report,
    read_tables,
    write_tables,
)
from .tool import (
    INSTALL_HINT,
    GpuNotFoundError,
    NsysError,
    NsysInfo,
    NsysNotFoundError,
    count_gpus,
    detect_nsys,
    export_stats,
    profile_command,
    profile_paths,
    report_names,
    require_gpus,
    require_nsys,
    stats_command,
)
from .waits import SYNC_WAIT_FUNCTIONS, is_sync_wait, range_waits, write_range_waits

__all__ = [
    "COLUMNS",
    "INSTALL_HINT",
    "REPORTS",
    "SYNC_WAIT_FUNCTIONS",
    "GpuNotFoundError",
    "NsysCsvError",
    "NsysError",
    "NsysInfo",
    "NsysNotFoundError",
    "build_tables",
    "calls_by_nodes",
    "count_gpus",
    "detect_nsys",
    "export_stats",
    "is_sync_wait",
    "memop_kind",
    "profile_command",
    "profile_paths",
    "range_waits",
    "read_report",
    "read_tables",
    "render_summary",
    "report_names",
    "require_gpus",
    "require_nsys",
    "split_range",
    "stats_command",
    "write_range_waits",
    "write_summary",
    "write_tables",
]
