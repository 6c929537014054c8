"""Harness results (``ring.bench`` CSV + the JSON beside it) as points for the fit."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..bench.results import check_pair, read_csv, schema_problem
from ..bench.schema import VARIANT_COLUMNS
from ..machine import host_label
from ..mpi.agree import GATHERED_BYTES, PREFLIGHT_ALGORITHMS
from ..mpi.agree import rides_preflight as plan_rides_preflight
from ..schedule import default_segment_bytes
from .costs import (
    ALGORITHMS,
    DEFAULT_GROUP_SIZE,
    DEFAULT_SEGMENT_BYTES,
    ModelInputError,
    backend_group_size,
)

__all__ = [
    "BUFFERS",
    "EXECUTORS",
    "REQUIRED_COLUMNS",
    "Group",
    "Point",
    "load_groups",
    "rides_preflight",
    "run_meta",
    "unfittable",
    "unpriced",
]

REQUIRED_COLUMNS = ("backend", "sync", "nodes", "dtype", "op", "bytes", "time_us")
# Backends whose nodes are threads of one process: every node's bytes go through the one
# memory bus, whether or not the harness filled ``shared_devices`` (it leaves it empty on
# host rows since device sharing became its meaning).
SHARED_BUS = frozenset({"cpu"})
# The cpu backend's ways of running a call's nodes (its ``executor`` column, empty for the
# other backends): the model prices a thread per node (or the calling thread for them all,
# inline); rows of another executor are left out.
EXECUTORS = frozenset({"", "nodes"})
# Where an MPI row's buffers lived (its ``buffers`` column, empty for the other backends):
# the model prices messages between the ranks' own buffers; a call on shared buffers (by
# position, no message) is left out.
BUFFERS = frozenset({"", "host"})


def unpriced(row: dict) -> str | None:
    """Why the model leaves out a row run another way than it prices (``executor=...``,
    ``buffers=...``), or None for a row it prices."""
    # A samples file (FILE.samples.csv) carries these columns only where they have a value.
    executor, buffers = row.get("executor") or "", row.get("buffers") or ""
    if executor not in EXECUTORS:
        return f"executor={executor}"
    return None if buffers in BUFFERS else f"buffers={buffers}"


# What the notes call the MPI rows left out by rides_preflight.
PREFLIGHT = f"mpi {' and '.join(PREFLIGHT_ALGORITHMS)} at <= {GATHERED_BYTES} B"
# Bytes of memory traffic per byte reduced by `a += b` (two reads, one write), the convention
# of the ceilings the harness records (ring.bench.ceilings, ring.bench.gpu).
ADD_TRAFFIC = 3


@dataclass(frozen=True)
class Point:
    algorithm: str
    nodes: int
    nbytes: int
    seconds: float
    # Workers (threads, or MPI ranks on one host) per core the row ran with; 0 where the
    # nodes are not CPU workers or it was not recorded (taken as not oversubscribed).
    nodes_per_core: float = 0.0
    # ring-segmented's block in the run: the backend's default on the machine that ran it.
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    # The cpu backend ran this row's calls on the calling thread, node after node (its
    # ``inline`` column): a regime of its own (ring.model.regimes).
    inline: bool = False
    # hierarchical's group size in the run: the backend's default (the harness gives none).
    group_size: int = DEFAULT_GROUP_SIZE
    # The sweep (CSV) the row came from: its index in the group's ``sources``.
    source: int = 0


@dataclass
class Group:
    """The rows of one (machine, backend, sync, dtype, op, variant): one set of α, β, γ."""

    key: dict[str, str]
    shared: bool
    points: list[Point] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    add_ceilings_GBps: list[float] = field(default_factory=list)
    cores: int = 0  # the machine's cores from the run's environment (0: not recorded)
    caches: tuple[int, int] | None = None  # its (L2, last-level) bytes, if recorded


def run_meta(csv_path: Path) -> dict:
    path = csv_path.with_suffix(".json")
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelInputError(f"{path}: unreadable JSON beside the CSV ({exc})") from exc
    if not isinstance(meta, dict):
        raise ModelInputError(f"{path}: not a ring.bench JSON (a {type(meta).__name__})")
    # A CSV of one run with another's JSON would be fitted with the other's machine.
    mismatch = check_pair(csv_path, meta)
    if mismatch:
        raise ModelInputError(mismatch)
    return meta


def machine_label(meta: dict, csv_path: Path) -> str:
    """The machine a result was measured on, from its environment; else its folder's name."""
    env = meta.get("environment") or {}
    if not env.get("cpu_model"):
        return csv_path.resolve().parent.name
    gpus = tuple(gpu.get("name", "?") for gpu in env.get("gpus") or [])
    return host_label(env["cpu_model"], env.get("cores", "?"), gpus)


def _add_ceiling(meta: dict, run: str, backend: str) -> float | None:
    """The reduction kernel's GB/s measured in the run that produced a row, if recorded."""
    runs = meta.get("runs") or []
    ceilings = meta.get("ceilings") or {}
    if run.isdigit() and int(run) < len(runs):
        ceilings = runs[int(run)].get("ceilings") or ceilings
    if backend == "gpu" and ceilings.get("gpu_reduce_GBps"):
        values = list(ceilings["gpu_reduce_GBps"].values())
        return float(sum(values) / len(values))
    value = ceilings.get("add_GBps")
    return float(value) if value else None


def _nodes_per_core(meta: dict, row: dict, nodes: int, where: str) -> float:
    """p of a row: its own ``threads_per_core`` (threaded backends), else for MPI the ranks
    on one host over the host's cores from the environment beside the CSV (the MPI rows do
    not carry the column); 0 when neither says.  A recorded value that is not a number > 0
    (NaN, 0) is refused: taken as "not recorded", it would price a crowded row as if it
    had a core per node."""
    cell = str(row.get("threads_per_core") or "").strip()
    if cell:
        try:
            recorded = float(cell)
        except ValueError:
            recorded = math.nan
        if not (math.isfinite(recorded) and recorded > 0):
            raise ModelInputError(
                f"{where}: threads_per_core is {cell!r}, must be a number > 0 "
                "(the workers per core the row ran with)"
            )
        return recorded
    env = meta.get("environment") or {}
    cores, hosts = env.get("cores"), env.get("mpi_hosts") or 1
    if row["backend"] != "mpi" or not isinstance(cores, int) or cores < 1:
        return 0.0
    return math.ceil(nodes / max(1, int(hosts))) / cores


def _caches(meta: dict) -> tuple[int, int] | None:
    """(L2, last-level) cache bytes of the machine a run recorded, if it did."""
    recorded = (meta.get("environment") or {}).get("cache_bytes") or {}
    l2, last = recorded.get("l2"), recorded.get("last_level")
    if isinstance(l2, int) and isinstance(last, int) and l2 > 0 and last > 0:
        return l2, last
    return None


def _number(csv_path: Path, line: int, row: dict, column: str) -> float:
    try:
        value = float(row[column])
    except (TypeError, ValueError):
        raise ModelInputError(
            f"{csv_path}:{line}: {column} is {row[column]!r}, not a number"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ModelInputError(f"{csv_path}:{line}: {column} is {value}, must be finite and >= 0")
    return value


def _whole(csv_path: Path, line: int, row: dict, column: str) -> int:
    value = _number(csv_path, line, row, column)
    if not value.is_integer():
        raise ModelInputError(f"{csv_path}:{line}: {column} is {value}, not a whole number")
    return int(value)


def rides_preflight(backend: str, algorithm: str, nodes: int, nbytes: int) -> bool:
    """Whether an MPI call's buffer travels in the pre-flight exchange every call makes
    (ring.mpi.agree.GATHERED_BYTES, host buffers): ``direct`` and ``reduce-broadcast``
    (ring.mpi.agree.PREFLIGHT_ALGORITHMS) then send no other message, so no algorithm can
    cost less.  Such rows are left out of the fit: a call of no step of
    its own is not the α–β–γ form (fitted with them, the reference MPI fit priced direct's
    steps low at every size, and picked it at N = 4 from 2 to 32 KiB where recursive
    doubling was 1.1-1.3x faster), and ``auto`` picks one of them there by this rule
    (ring.model.table.fastest)."""
    if backend != "mpi" or not plan_rides_preflight("allreduce", algorithm):
        return False
    return nodes > 1 and 0 < nbytes <= GATHERED_BYTES


def _algorithm(row: dict) -> str | None:
    """The row's algorithm where the model prices it: a library algorithm, not a peer's
    own (numpy-direct, mpi-allreduce and nccl pick their own way)."""
    return row["algorithm"] if row["algorithm"] in ALGORITHMS else None


def _read(csv_path: Path) -> list[dict]:
    if not csv_path.is_file():
        raise ModelInputError(f"{csv_path}: no such file")
    columns, rows = read_csv(csv_path)
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise ModelInputError(
            f"{csv_path}: not a ring.bench result, missing columns {', '.join(missing)}"
        )
    old = schema_problem(csv_path, columns)
    if old:
        raise ModelInputError(old)
    if not rows:
        raise ModelInputError(f"{csv_path}: no rows")
    return rows


def _add_rows(groups: dict, csv_path: Path, skipped: set[str], variants: bool) -> None:
    meta = run_meta(csv_path)
    machine = machine_label(meta, csv_path)
    caches = _caches(meta)
    for line, row in enumerate(_read(csv_path), start=2):
        why = unpriced(row)
        if why is not None and not variants:
            skipped.add(why)
            continue
        algorithm = _algorithm(row)
        if algorithm is None:
            skipped.add(row["algorithm"])
            continue
        nodes = _whole(csv_path, line, row, "nodes")
        nbytes = _whole(csv_path, line, row, "bytes")
        seconds = _number(csv_path, line, row, "time_us") * 1e-6
        if nodes < 1:
            raise ModelInputError(f"{csv_path}:{line}: nodes is {nodes}, must be >= 1")
        if nodes == 1 or nbytes == 0 or seconds == 0:
            continue  # nothing moves: no information on α, β, γ
        if rides_preflight(row["backend"], algorithm, nodes, nbytes):
            skipped.add(PREFLIGHT)
            continue
        # A variant at the one executor (buffers) priced names no group of its own: every
        # priced cpu row says executor=nodes, every priced MPI row buffers=host.  Another
        # (by `variants`) is a group of its own, whose nodes share one memory.
        variant = {
            c: row[c]
            for c in VARIANT_COLUMNS
            if row.get(c) and (c not in ("executor", "buffers") or why is not None)
        }
        key = {"machine": machine, **{c: row[c] for c in ("backend", "sync", "dtype", "op")}}
        key.update(variant)
        shared = (
            str(row.get("shared_devices", "")).lower() == "true"
            or row["backend"] in SHARED_BUS
            or why is not None
        )
        group = groups.setdefault((tuple(key.items()), shared), Group(key, shared))
        per_core = _nodes_per_core(meta, row, nodes, f"{csv_path}:{line}")
        # The harness records no block size: the backend took its default on that machine.
        segment = default_segment_bytes(nodes, caches) if caches else DEFAULT_SEGMENT_BYTES
        inline = row.get("inline") == "1"
        group_size = backend_group_size(row["backend"], nodes)
        if str(csv_path) not in group.sources:
            group.sources.append(str(csv_path))
        source = group.sources.index(str(csv_path))
        group.points.append(
            Point(algorithm, nodes, nbytes, seconds, per_core, segment, inline, group_size, source)
        )
        cores = (meta.get("environment") or {}).get("cores")
        if isinstance(cores, int) and cores > 0:
            group.cores = cores
        elif not group.cores and per_core > 0:
            # No environment beside the CSV: p is the threads that ran over the cores, and
            # a call the cpu backend ran inline ran on one thread.
            threads = 1 if inline else nodes
            group.cores = round(threads / per_core)
        group.caches = caches or group.caches
        ceiling = _add_ceiling(meta, str(row.get("run", "")), row["backend"])
        if ceiling is not None and ceiling not in group.add_ceilings_GBps:
            group.add_ceilings_GBps.append(ceiling)


# The α–β–γ form's coefficients: a group measured at fewer sizes than these has no honest
# fit (one size fits any α exactly, with a zero-width interval).
FITTED = ("alpha", "beta", "gamma")


def unfittable(group: Group) -> str | None:
    """Why the rows of ``group`` cannot be fitted honestly, or None."""
    sizes = sorted({p.nbytes for p in group.points})
    if len(sizes) >= len(FITTED):
        return None
    named = ", ".join(f"{k}={v}" for k, v in group.key.items() if k != "machine")
    return (
        f"{', '.join(group.sources)}: {named} has {len(sizes)} size(s) with N >= 2 "
        f"({', '.join(map(str, sizes))} B), fewer than the {len(FITTED)} coefficients "
        f"{', '.join(FITTED)}: measure a sweep of sizes (-b, -e, -f)"
    )


def load_groups(
    paths: Sequence[str | Path], variants: bool = False
) -> tuple[list[Group], list[str]]:
    """The fit groups of these CSVs, and the backends/algorithms left out (with why).

    ``variants``: rows run another way than the model prices (``executor=slices``,
    ``buffers=shared``) are not left out but fitted as groups of their own, with the same
    forms and every node's bytes through one memory: their α, β and γ describe that way
    of running (what the report splits a series' time by), not the prices ``auto`` uses."""
    if not paths:
        raise ModelInputError("no CSV given: pass one or more ring.bench result files")
    groups: dict = {}
    skipped: set[str] = set()
    for path in paths:
        _add_rows(groups, Path(path), skipped, variants)
    if not groups:
        raise ModelInputError(
            f"no row of a known algorithm with N >= 2 in {', '.join(map(str, paths))} "
            f"(left out: {', '.join(sorted(skipped)) or 'nothing'})"
        )
    notes = [
        f"{name}: not fitted ("
        + (
            "the model prices the cpu backend's thread per node only"
            if name.startswith("executor=")
            else "the model prices messages between the ranks' own buffers"
            if name.startswith("buffers=")
            else "its buffer travels in the pre-flight exchange: no step of its own"
            if name == PREFLIGHT
            else "a peer whose algorithm is its library's choice, or unknown"
        )
        + ")"
        for name in sorted(skipped)
    ]
    return list(groups.values()), notes
