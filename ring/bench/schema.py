"""The result files' schema: one owner that the harness writes by and the model and the
report read by.

A run writes ``FILE.csv`` (one row per series and size), ``FILE.json`` beside it (the
environment, the ceilings, the command) and ``FILE.samples.csv`` (one row per timed call).
A **launch set** (``python -m ring.bench launches``) writes the same three files for several
launches of one run, each row and call carrying its ``launch``; its JSON keeps every
launch's own document under ``launches``.  Metrics (docs/harness.md): ``algbw_GBps`` =
S / t / 1e9; ``busbw_GBps`` = algbw·2(N-1)/N; ``traffic_GBps`` = the backend's schedule
bytes / t / 1e9; ``t`` the median of the timed calls.
"""

from __future__ import annotations

__all__ = [
    "COLUMNS",
    "FLOAT_COLUMNS",
    "INTEGER_COLUMNS",
    "KINDS",
    "LAUNCH",
    "MIGRATION",
    "OPTIONAL_FLOAT_COLUMNS",
    "OUT_OF_PLACE_COLUMNS",
    "POINT_KEYS",
    "RANK_COLUMNS",
    "SAMPLE_COLUMNS",
    "SCHEMA",
    "SCHEMA_COLUMNS",
    "SERIES_KEYS",
    "TEXT_COLUMNS",
    "TIME_COLUMNS",
    "VARIANT_COLUMNS",
]

# The version of the result files (the tidy CSV and the JSON beside it, which records it).
# 2: every row names its algorithm, and the columns executor and buffers say how the ring
# ran it (empty where the backend has no such choice); 1 had them only where a run varied
# them.  Readers take this schema alone and name the migration for an older file.
SCHEMA = 2
MIGRATION = (
    "schema 2 gives every row its algorithm and the columns executor and buffers: measure "
    "again, or migrate the file to tidy CSV schema 2: algorithm 'ring' on a ring backend's row "
    "that has none (a peer's own name on a peer's), executor 'nodes' on cpu rows, buffers "
    "'host' on mpi rows (empty elsewhere), and schema 2 in the JSON beside it"
)

# What a result's JSON says it is ("kind"): absent for one run of the harness.
KINDS = {
    "launches": "several launches of one run, alternated (ring.bench.launches)",
    "finalists": "the series a screen picked for confirmation (ring.bench.selection)",
    "alternated launches": "two backends that cannot share a launch (ring.bench.alternate)",
}

# The median and the spread of a point's timed calls, in every result CSV.
TIME_COLUMNS = ("time_us", "time_us_min", "time_us_p25", "time_us_p75", "time_us_max")

COLUMNS = (
    "backend",
    "sync",
    # The library's algorithm a ring backend ran, or a peer's own backend name.
    "algorithm",
    # How the cpu backend ran it: "nodes" (a thread per node) or "slices" (by position);
    # empty for the other backends.
    "executor",
    # Where an MPI backend's buffers lived: "host", "device" or "shared" (one memory every
    # rank maps); empty for the other backends.
    "buffers",
    "nodes",
    "dtype",
    "op",
    "bytes",
    "count",
    "iters",
    *TIME_COLUMNS,
    "algbw_GBps",
    "busbw_GBps",
    "traffic_GBps",
    "wrong",
    "shared_devices",
)

# What a schema-1 file lacks (in some or all of its rows).
SCHEMA_COLUMNS = ("algorithm", "executor", "buffers")

# Columns that tell apart rows of one (backend, sync, nodes, dtype, op, bytes): a
# backend's variants (Backend.variants).  Absent from a CSV means one variant.
VARIANT_COLUMNS = ("graphs", "inline_bytes", "executor", "buffers")
# The columns that name a series within one run of one N, dtype and op.
SERIES_KEYS = ("backend", "sync", "algorithm", *VARIANT_COLUMNS)
# The columns that name a point of a series.
POINT_KEYS = ("nodes", "dtype", "op", "bytes")

# The out-of-place group (nccl-tests' first), where the run timed it (--out-of-place 1).
OUT_OF_PLACE_COLUMNS = ("oop_time_us", "oop_algbw_GBps", "oop_busbw_GBps", "oop_wrong")
# MPI rows: each rank's mean time over the calls, its minimum, average and maximum over
# the ranks (OSU's -f), in place and out of place.
RANK_COLUMNS = ("rank_mean_us_min", "rank_mean_us_avg", "rank_mean_us_max")

# A launch set's rows and calls: which launch (1, 2, ...) measured them.
LAUNCH = "launch"

# One row per timed call, beside every result CSV (``FILE.samples.csv``): what the spread
# of a median, or of a ratio of medians within a launch, is computed from.
SAMPLE_COLUMNS = (
    "backend",
    "sync",
    "algorithm",
    "nodes",
    "dtype",
    "op",
    "bytes",
    "call",
    "time_us",
)

# How a reader types the columns.
INTEGER_COLUMNS = ("nodes", "bytes", "count", "iters", "wrong")
FLOAT_COLUMNS = (*TIME_COLUMNS, "algbw_GBps", "busbw_GBps")
# Empty where the harness cannot know it (NCCL's traffic is hidden inside its kernels; a
# run in place only has no out-of-place group; a run of one process has no ranks).
OPTIONAL_FLOAT_COLUMNS = (
    "traffic_GBps",
    *OUT_OF_PLACE_COLUMNS,
    *RANK_COLUMNS,
    *(f"oop_{c}" for c in RANK_COLUMNS),
)
TEXT_COLUMNS = ("backend", "sync", "algorithm", "dtype", "op")
