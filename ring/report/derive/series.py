"""What ran: each row's series in the study's words, whether it is ours or a peer, and
whether its workers had a core each.

A label says everything that decides a call's time: the backend and algorithm, and how the
call ran: by the cpu backend's executor (``nodes``: a thread per node; ``slices``: the plan
by position), on the calling thread (``inline``) or on worker threads, on each MPI rank's own
buffers or on memory every rank on the host maps (``shared buffers``), replayed as a CUDA
graph.  Peers keep their own names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import pandas as pd

from ...bench.schema import SERIES_KEYS
from ...bench.selection import is_peer
from ...cpu import INLINE_BYTES

__all__ = [
    "KINDS",
    "PEER_NAMES",
    "RING_BACKENDS",
    "family_label",
    "how_it_ran",
    "is_peer",
    "kind_of",
    "label",
    "labelled",
    "name",
    "oversubscribed",
    "series_of",
    "workers_per_core",
]

# Backends that execute this project's plans, and the kind of study each belongs to.
RING_BACKENDS = ("cpu", "mpi", "gpu")
KINDS = {
    "cpu": "cpu",
    "numpy-direct": "cpu",
    "seed-cpp": "cpu",
    "mpi": "mpi",
    "mpi-allreduce": "mpi",
    "gpu": "gpu",
    "nccl": "gpu",
}
# A peer as its users know it.
PEER_NAMES = {
    "numpy-direct": "numpy-direct",
    "seed-cpp": "seed-cpp (the original's C++ design)",
    "mpi-allreduce": "MPI_Allreduce",
    "nccl": "NCCL",
}


def kind_of(backend: str) -> str:
    return KINDS.get(backend, backend)


def series_of(row: Mapping) -> tuple[str, ...]:
    """The columns that name a row's series, as one key."""
    return tuple(str(row.get(key) or "") for key in SERIES_KEYS)


def _inline(row: Mapping) -> bool | None:
    value = row.get("inline")
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return None
    return bool(float(value))


def how_it_ran(row: Mapping) -> list[str]:
    """The parts of a row's label after its algorithm: executor, thread, buffers, sync."""
    parts = []
    if row.get("executor"):
        parts.append(str(row["executor"]))
    inline = _inline(row)
    if inline is not None and row.get("backend") == "cpu":
        parts.append("inline" if inline else "threads")
    limit = row.get("inline_bytes")
    limit = "" if limit is None or (isinstance(limit, float) and math.isnan(limit)) else str(limit)
    if limit and limit != str(INLINE_BYTES):
        parts.append(f"inline_bytes={limit}")
    if row.get("buffers"):
        parts.append(f"{row['buffers']} buffers")
    if str(row.get("graphs") or "") == "1":
        parts.append("CUDA graphs")
    if row.get("sync") not in (None, "", "none", "pairwise"):
        parts.append(f"{row['sync']} sync")
    return parts


def name(row: Mapping) -> str:
    """A series' name across its sizes: :func:`label` without where each call ran (inline
    or on the threads, which the cpu backend decides by size)."""
    backend = str(row["backend"])
    if is_peer(row):
        return label(row)
    parts = [p for p in how_it_ran(row) if p not in ("inline", "threads")]
    return f"{backend} {row['algorithm']}" + (f" ({', '.join(parts)})" if parts else "")


def label(row: Mapping) -> str:
    """``cpu reduce-broadcast (slices, inline)``, ``mpi ring (shared buffers)``, a peer's
    own name."""
    backend = str(row["backend"])
    if is_peer(row):
        name = PEER_NAMES.get(backend, backend)
        buffers = f" ({row['buffers']} buffers)" if row.get("buffers") else ""
        return name + buffers
    parts = how_it_ran(row)
    return f"{backend} {row['algorithm']}" + (f" ({', '.join(parts)})" if parts else "")


def family_label(rows: Iterable[Mapping]) -> str:
    """Several series of ours named as one family: ``cpu reduce-broadcast (either executor,
    inline)``; ``cpu reduce-broadcast or direct (slices, inline)``."""
    rows = list(rows)
    if len(rows) == 1:
        return label(rows[0])
    backends = list(dict.fromkeys(str(r["backend"]) for r in rows))
    algorithms = list(dict.fromkeys(str(r["algorithm"]) for r in rows))
    parts = [how_it_ran(r) for r in rows]
    common = [p for p in parts[0] if all(p in other for other in parts[1:])]
    executors = {str(r.get("executor") or "") for r in rows}
    buffers = {str(r.get("buffers") or "") for r in rows}
    if len(executors) > 1:
        common.insert(0, "either executor")
    if len(buffers) > 1:
        common.append("host or shared buffers")
    name = f"{'/'.join(backends)} {' or '.join(algorithms)}"
    return name + (f" ({', '.join(common)})" if common else "")


def workers_per_core(row: Mapping, environment: Mapping) -> float:
    """Threads or ranks per usable core a row ran with: its own ``threads_per_core`` where
    the harness wrote one, else N over the machine's cores for workers one per node."""
    recorded = row.get("threads_per_core")
    try:
        value = float(recorded) if recorded is not None else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not math.isnan(value):
        return value
    one_per_node = row.get("backend") in ("cpu", "mpi", "mpi-allreduce", "seed-cpp")
    if not one_per_node or row.get("executor") == "slices":
        return 0.0
    if str(row.get("backend")).startswith("mpi"):
        # Ranks share the hosts' cores (mpirun binds each rank to one, so a rank's own
        # affinity says 1).
        hosts = environment.get("mpi_hosts") or 1
        cores = environment.get("cores")
        cores = cores * hosts if isinstance(cores, int) and isinstance(hosts, int) else None
    else:
        cores = environment.get("usable_cores") or environment.get("cores")
    if not isinstance(cores, int) or cores < 1:
        return 0.0
    return float(row["nodes"]) / cores


def oversubscribed(row: Mapping, environment: Mapping) -> bool:
    """More workers than cores: the cores time-slice the nodes, and a time says more about
    the scheduler than the code."""
    return workers_per_core(row, environment) > 1.0


def labelled(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``label`` and ``peer`` columns."""
    records = rows.to_dict("records")
    return rows.assign(label=[label(r) for r in records], peer=[is_peer(r) for r in records])
