"""``algorithm="auto"``: the algorithm a decision table names for a call.

A decision table is data: per backend, collective, N and power-of-two size (and on the cpu
backend, whether the call runs inline or on the worker threads), the algorithms worth
running, the one the model predicts fastest first.
The study's cost model writes them (``python -m ring.model decisions``, from a fit of
sweeps measured on a machine); the library only reads them, so it never imports the model.

Which table: the file ``RING_AUTO_TABLE`` names, else the committed table (package data,
``ring/decisions/<machine>.json``) of the reference machine closest to this one: the same
CPU model and cores, then the same CPU model, then the table of the most algorithms.

A call is decided as the next tabulated size up (a power of two) and the next tabulated N
up; on the cpu backend, by the inline column where the call runs inline and the table has
one for its N and size, else by the threads column.  On the mpi backend a call whose
buffer rides the pre-flight exchange every call makes (the table's ``preflight``: the
bytes it carries and the algorithms whose plans run from it) takes the first of those
algorithms the table lists: they then send no other message, so no algorithm can cost
less.  Picks
are cached per call shape: a repeated call costs one dictionary look-up.  Every rank of an
MPI job on one host reads the same table, so every rank picks the same algorithm (and the
pre-flight exchange compares the resolved algorithm, so ranks that read different tables
fail together instead of deadlocking).
"""

from __future__ import annotations

import bisect
import functools
import json
import os
from pathlib import Path

from .machine import host_label

__all__ = [
    "DECISIONS",
    "SCHEMA",
    "TABLE_ENV",
    "AutoTableError",
    "choose",
    "closeness",
    "generation",
    "load_tables",
    "ranked",
    "reset",
    "table_files",
    "table_for",
    "unpriced",
]

TABLE_ENV = "RING_AUTO_TABLE"
DECISIONS = Path(__file__).with_name("decisions")
SCHEMA = 1


class AutoTableError(ValueError):
    """A decision table that is missing, unreadable, or has no answer for a call."""


def table_files() -> list[Path]:
    """The committed decision tables, one per reference machine."""
    return sorted(DECISIONS.glob("*.json"))


def load_tables(path: Path) -> list[dict]:
    """The tables of a decision file (one per backend), checked enough to look up in."""
    if not path.is_file():
        raise AutoTableError(f"{path}: no such decision table (python -m ring.model decisions)")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AutoTableError(f"{path}: not a readable decision table ({exc})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise AutoTableError(f"{path}: not a ring decision table of schema {SCHEMA}")
    tables = document.get("tables")
    needed = ("machine", "backend", "nodes", "candidates", "picks")
    if not isinstance(tables, list) or not all(
        isinstance(t, dict) and all(k in t for k in needed) for t in tables
    ):
        raise AutoTableError(f"{path}: a table lacks one of {', '.join(needed)}")
    for table in tables:
        named = {a for names in table["candidates"].values() for a in names}
        picked = {
            pick
            for columns in table["picks"].values()
            for runs in columns.values()
            for column in runs.values()
            for _, order in column
            for pick in order
        }
        unknown = sorted(picked - named)  # the names themselves: ring.communicator's check
        if unknown:
            raise AutoTableError(f"{path}: the {table['backend']} table names {unknown[0]!r}")
    return tables


def closeness(label: str, local: str) -> int:
    """2: the same machine label; 1: the same CPU model; 0: another machine."""
    if label == local:
        return 2
    return int(label.split(",")[0] == local.split(",")[0])


def _richest(table: dict) -> int:
    return len({a for names in table["candidates"].values() for a in names})


@functools.cache
def table_for(backend: str) -> tuple[dict, str]:
    """The table ``auto`` reads on ``backend``, and the file it came from."""
    chosen = os.environ.get(TABLE_ENV)
    paths = [Path(chosen)] if chosen else table_files()
    found = [(t, str(p)) for p in paths for t in load_tables(p) if t["backend"] == backend]
    if not found:
        where = f"{TABLE_ENV}={chosen}" if chosen else f"the committed tables in {DECISIONS}"
        raise AutoTableError(
            f"{where} has no table for backend {backend!r}: write one from a fit of that "
            f"backend's sweep (python -m ring.model decisions FIT --out FILE) and name it "
            f"in {TABLE_ENV}"
        )
    local = host_label()
    return max(found, key=lambda f: (closeness(f[0]["machine"], local), _richest(f[0])))


def _next_up(values: list[int], value: int) -> int:
    """The first of sorted ``values`` at or above ``value`` (the last if none is)."""
    return values[min(bisect.bisect_left(values, value), len(values) - 1)]


@functools.lru_cache(maxsize=4096)
def choose(
    backend: str, collective: str, nodes: int, nbytes: int, inline_bytes: int | None = None
) -> str:
    """The algorithm ``auto`` runs for this call without measuring (cached); ``inline_bytes``:
    the cpu communicator's, which says whether the call runs inline (None: on threads)."""
    return ranked(backend, collective, nodes, nbytes, inline_bytes)[0]


@functools.lru_cache(maxsize=4096)
def ranked(
    backend: str, collective: str, nodes: int, nbytes: int, inline_bytes: int | None = None
) -> tuple[str, ...]:
    """The candidates the table leaves in for this call, the model's pick first (a planner
    that measures, ring.wisdom, tries them)."""
    table, path = table_for(backend)
    names = table["candidates"].get(collective)
    if not names:
        raise AutoTableError(f"{path}: the {backend} table names no algorithm for {collective}")
    preflight = table.get("preflight")  # (bytes, algorithms): the mpi backend's
    if preflight and nodes > 1 and 0 < nbytes <= preflight[0]:
        for name in preflight[1]:  # the fewest local operations first
            if name in names:
                return (name,)
    per_nodes = table["picks"][collective]
    counts = sorted(int(n) for n in per_nodes)
    columns = per_nodes[str(_next_up(counts, nodes))]
    log2 = max(0, (max(nbytes, 1) - 1).bit_length())  # the next power of two up
    inline = inline_bytes is not None and nbytes <= inline_bytes and "inline" in columns
    inline = inline and log2 <= table.get("inline_log2_max", 30)
    runs = columns["inline" if inline else "threads"]
    starts = [start for start, _ in runs]
    return tuple(runs[max(0, bisect.bisect_right(starts, log2) - 1)][1])


@functools.lru_cache(maxsize=64)
def unpriced(backend: str, collective: str, having: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``having`` (the library's algorithms of ``collective``) that the backend's
    table never priced: a table fitted before an algorithm existed cannot prune it, so a
    planner that measures tries it after the table's own candidates."""
    table, _ = table_for(backend)
    priced = set(table["candidates"].get(collective, ()))
    return tuple(a for a in having if a not in priced)


_generation = 0


def generation() -> int:
    """How many times :func:`reset` ran: a pick made since the last one is still the pick
    (``choose`` is cached), so a caller that kept one asks again only when this moves."""
    return _generation


def reset() -> None:
    """Forget the tables and picks read so far (after ``RING_AUTO_TABLE`` changed)."""
    global _generation
    table_for.cache_clear()
    choose.cache_clear()
    ranked.cache_clear()
    unpriced.cache_clear()
    _generation += 1
