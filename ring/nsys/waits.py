"""Time each NVTX range spends blocked in synchronisation primitives.

``osrt_sum`` totals OS runtime calls over the whole run and every thread: it mixes the
waits inside a ring step (a node waiting for its left neighbour) with workers idling
between calls.  Only the trace can tell them apart, so this reads the SQLite file that
``nsys stats`` exports next to the report and clips every blocking call to the push/pop
ranges open on the same thread at the time.  The result is written as one more
``nsys stats``-style CSV, ``<prefix>_ring_waits.csv``, so that :mod:`ring.nsys.tables`
reads it with the reports of either nsys generation.
"""

from __future__ import annotations

import csv
import io
import sqlite3
from pathlib import Path

from ..bench.results import write_text_atomic

__all__ = [
    "SYNC_WAIT_FUNCTIONS",
    "WAITS_HEADER",
    "is_sync_wait",
    "range_waits",
    "write_range_waits",
]

# Calls that block a thread until another thread acts.  CPython's lock.acquire() is
# sem_wait / sem_clockwait, its GIL is pthread_cond_(timed)wait, and the CUDA runtime's
# blocking synchronisation ends in futex or pthread_cond_wait.
SYNC_WAIT_FUNCTIONS = frozenset(
    {
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "pthread_cond_clockwait",
        "pthread_mutex_lock",
        "pthread_mutex_timedlock",
        "pthread_mutex_clocklock",
        "pthread_rwlock_rdlock",
        "pthread_rwlock_wrlock",
        "pthread_rwlock_timedrdlock",
        "pthread_rwlock_timedwrlock",
        "pthread_rwlock_clockrdlock",
        "pthread_rwlock_clockwrlock",
        "pthread_spin_lock",
        "pthread_barrier_wait",
        "pthread_join",
        "sem_wait",
        "sem_timedwait",
        "sem_clockwait",
        "futex",
    }
)

WAITS_HEADER = ["Range", "Function", "Calls", "Wait Time (ns)"]

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE) the ranges and domains use.
_PUSHPOP = (59, 70)
_DOMAIN_CREATE = 75
# The process part of a serialized GlobalId (see nsys' own nvtx reports).
_PID_MASK = 0x0000FFFFFF000000


def is_sync_wait(function: str) -> bool:
    """Whether an OS runtime function name is a blocking synchronisation primitive."""
    name = function.strip()
    for suffix in ("64", "_time64"):  # glibc's time64 aliases, e.g. sem_clockwait64
        if name.endswith(suffix) and name[: -len(suffix)] in SYNC_WAIT_FUNCTIONS:
            return True
    return name in SYNC_WAIT_FUNCTIONS


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def range_waits(sqlite: str | Path) -> list[tuple[str, str, int, int]]:
    """``(range, function, calls, wait_ns)`` for every push/pop range that waited.

    Range names are built the way ``nvtx_sum`` builds them (``domain:message``).  Only
    outermost OS runtime calls count, so a wait is never counted twice through nesting.
    """
    path = Path(sqlite)
    if not path.is_file():
        raise FileNotFoundError(f"no SQLite export at {path}")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        columns = _trace_columns(db, path)
        if columns is None:
            return []
        nvtx_cols, osrt_cols = columns
        longest = _wait_table(db, osrt_cols)
        if longest is None:
            return []
        rows = db.execute(
            f"""
            WITH {_ranges_sql(nvtx_cols)}
            SELECT r.name, w.fn, count(*),
                   sum(min(w.end, r.end) - max(w.start, r.start))
            FROM ranges AS r JOIN waits AS w
                ON w.tid = r.tid AND w.start < r.end AND w.end > r.start
                   AND w.start >= r.start - ?
            GROUP BY 1, 2
            ORDER BY 1, 2
            """,
            (longest,),
        ).fetchall()
    finally:
        db.close()
    return [(name, fn, int(calls), int(wait)) for name, fn, calls, wait in rows if name]


def _trace_columns(db: sqlite3.Connection, path: Path) -> tuple[set[str], set[str]] | None:
    """The columns of NVTX_EVENTS and OSRT_API; None when the export has no such trace."""
    needed = {"NVTX_EVENTS", "OSRT_API", "StringIds"}
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    if not needed <= tables:
        return None
    nvtx_cols = _columns(db, "NVTX_EVENTS")
    osrt_cols = _columns(db, "OSRT_API")
    for table, cols, want in (
        ("NVTX_EVENTS", nvtx_cols, {"start", "end", "eventType", "globalTid", "text"}),
        ("OSRT_API", osrt_cols, {"start", "end", "globalTid", "nameId"}),
    ):
        if not want <= cols:
            raise ValueError(
                f"{path}: table {table} lacks column(s) {sorted(want - cols)}; "
                f"columns found: {sorted(cols)}"
            )
    return nvtx_cols, osrt_cols


def _wait_table(db: sqlite3.Connection, osrt_cols: set[str]) -> int | None:
    """Fill temp table ``waits`` with the outermost blocking calls; the longest one's ns,
    or None when no blocking primitive was traced."""
    nesting = "AND coalesce(o.nestingLevel, 0) = 0" if "nestingLevel" in osrt_cols else ""
    wait_names = sorted(
        {value for (value,) in db.execute("SELECT value FROM StringIds") if is_sync_wait(value)}
    )
    if not wait_names:
        return None
    marks = ",".join("?" * len(wait_names))
    db.execute("PRAGMA temp_store = MEMORY")
    db.execute(
        f"""CREATE TEMP TABLE waits AS
            SELECT o.globalTid AS tid, o.start AS start, o.end AS end, s.value AS fn
            FROM OSRT_API AS o JOIN StringIds AS s ON s.id = o.nameId
            WHERE s.value IN ({marks}) {nesting}""",
        wait_names,
    )
    db.execute("CREATE INDEX temp.waits_by_thread ON waits (tid, start)")
    (longest,) = db.execute("SELECT coalesce(max(end - start), 0) FROM waits").fetchone()
    return longest


def _ranges_sql(nvtx_cols: set[str]) -> str:
    """The ``domains`` and ``ranges`` tables of the query: push/pop ranges named as
    ``nvtx_sum`` names them, whichever columns this nsys version exports."""
    text_id = "sid.value" if "textId" in nvtx_cols else "NULL"
    domain_join = (
        f"""LEFT JOIN domains AS d ON ne.domainId = d.id
            AND (ne.globalTid & {_PID_MASK}) = d.pid"""
        if "domainId" in nvtx_cols
        else "LEFT JOIN domains AS d ON 0"
    )
    domains = (
        f"""SELECT domainId AS id, globalTid & {_PID_MASK} AS pid, min(text) AS name
            FROM NVTX_EVENTS WHERE eventType = {_DOMAIN_CREATE} GROUP BY 1, 2"""
        if "domainId" in nvtx_cols
        else "SELECT NULL AS id, NULL AS pid, NULL AS name WHERE 0"
    )
    text_join = "LEFT JOIN StringIds AS sid ON ne.textId = sid.id" if text_id != "NULL" else ""
    return f"""domains AS ({domains}),
        ranges AS (
            SELECT ne.start AS start, ne.end AS end, ne.globalTid AS tid,
                CASE WHEN d.name IS NOT NULL
                     THEN d.name || ':' || coalesce({text_id}, ne.text)
                     ELSE coalesce({text_id}, ne.text) END AS name
            FROM NVTX_EVENTS AS ne {domain_join} {text_join}
            WHERE ne.eventType IN ({",".join(map(str, _PUSHPOP))}) AND ne.end IS NOT NULL
        )"""


def write_range_waits(sqlite: str | Path, out: str | Path) -> Path:
    """Write :func:`range_waits` as CSV (0 bytes when nothing waited, as nsys does)."""
    rows = range_waits(sqlite)
    out = Path(out)
    text = io.StringIO()
    if rows:
        writer = csv.writer(text)
        writer.writerow(WAITS_HEADER)
        writer.writerows(rows)
    write_text_atomic(out, text.getvalue())  # whole, or the old file
    return out
