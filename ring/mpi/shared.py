"""Host memory every rank on the host maps: MPI calls on it run by position, with no
messages.

:meth:`ring.mpi.MpiRing.shared_buffer` (collective) gives each rank an array whose memory
every other rank of the ring maps too: each rank creates a file of its part in
``/dev/shm`` (reserved whole with ``posix_fallocate``, so a full ``/dev/shm`` is an error
here, not a ``SIGBUS`` later), maps its peers' files, and once all have mapped all, removes
its own (the mappings stay; nothing is left behind).  The memory lives as long as the
returned array: the ring keeps only its peers' mappings.  A process killed between making
its part and removing it (``SIGKILL``, or a job aborted while its ranks waited) cannot
remove it; the next allocation on the host does (:func:`remove_stale`).

A call on such arrays (every rank its own, from the same allocation) runs the plan the
way ``CpuCommunicator(executor="slices")`` does (:mod:`ring.host.positions`): a plan never mixes
positions (:mod:`ring.host.positions`), so rank ``r`` takes slice ``r`` of the positions and
applies every node's operations there, tile by tile, on every rank's memory.  The
pre-flight exchange is the barrier before (every rank has entered the call, so its buffer
holds its input) and one ``Barrier`` after (no rank returns while another still writes its
buffer).  Memory sees each input read once and each result written once, with no copy
through a message: bit for bit the plan's result, as by messages.
"""

from __future__ import annotations

import importlib
import mmap
import os
import secrets
import tempfile
import weakref
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from .. import nvtx
from ..host.moves import run_ranged
from ..host.positions import (
    by_position,
    scratch_slots,
    slice_bounds,
    tile_elements,
    tile_operations,
)
from .steps import form_plan

__all__ = [
    "SHM_DIR_ENV",
    "SharedArrays",
    "SharedBlock",
    "allocate",
    "bind_shared",
    "remove_stale",
    "run_shared",
    "shared_directory",
]

# Where the parts are made, when set (shared_directory).
SHM_DIR_ENV = "RING_SHM_DIR"
# A part's file name: this prefix, the pid of the rank that made it, a random suffix.
_PREFIX = "ring-mpi-"
# A rank's slice of the positions starts on a page: no two ranks write one cache line.
_GRANULE_BYTES = 4096
# Programs kept per allocation (one per call form: collective, op, algorithm, options).
_KEPT = 64


class SharedBlock(NamedTuple):
    """One allocation as a ring holds it: this rank's array (weakly), the allocation's
    number (the same on every rank) and every rank's memory as bytes."""

    array: weakref.ref
    ident: int
    memory: list
    programs: dict  # id(form) -> (form, program): made on a form's first call


def shared_directory() -> str:
    """Where the parts' files are made: ``$RING_SHM_DIR`` when set, else ``/dev/shm``
    (memory), else the temporary directory (``$TMPDIR``).  On a tmpfs mounted with
    ``huge=always`` the parts get huge pages, which ``/dev/shm`` (mounted without a
    ``huge=`` option on most systems) does not give (docs/api.md, "Shared buffers and huge
    pages")."""
    chosen = os.environ.get(SHM_DIR_ENV)
    if chosen:
        if not (os.path.isdir(chosen) and os.access(chosen, os.W_OK | os.X_OK)):
            raise ValueError(f"{SHM_DIR_ENV}={chosen} is not a directory this user can write")
        return os.path.abspath(chosen)  # the ranks map each other's parts by this path
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is not a zombie (which maps nothing; a
    container's first process may never reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[:1] != [b"Z"]
    except OSError:  # no /proc, or it ended meanwhile
        return True


def remove_stale(directory: str) -> list[str]:
    """Remove the parts in ``directory`` that processes left when they died mid-allocation:
    files named for a pid that no longer runs, owned by this user; returns their names.
    (A part is named for its maker's pid in that process's PID namespace: ranks of another
    namespace that share ``/dev/shm`` could lose a part while they allocate, and would get
    the same error on every rank, as for a part that cannot be mapped.)"""
    removed: list[str] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        pid = name[len(_PREFIX) :].split("-", 1)[0]
        if not name.startswith(_PREFIX) or not pid.isdigit() or _alive(int(pid)):
            continue
        path = os.path.join(directory, name)
        try:
            if os.stat(path).st_uid == os.getuid():
                os.unlink(path)
                removed.append(name)
        except OSError:  # removed by another rank meanwhile, or not ours to remove
            continue
    return removed


def _check_request(count: Any, dtype: Any) -> tuple[int, np.dtype]:
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
        raise TypeError(f"count must be an integer, got {type(count).__name__}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    kind = np.dtype(dtype)
    if kind.kind not in "biufc" or kind.hasobject:
        raise TypeError(f"dtype must be a numeric NumPy dtype, got {kind}")
    return int(count), kind


def _all_ranks(comm, stage: str, error: BaseException | None, cls=RuntimeError) -> None:
    """Raise the same error on every rank when any rank's ``error`` is set."""
    errors = comm.allgather(None if error is None else f"{type(error).__name__}: {error}")
    failed = [f"rank {rank}: {text}" for rank, text in enumerate(errors) if text is not None]
    if failed:
        raise cls(f"ring.mpi shared_buffer: {stage} failed ({'; '.join(failed)})")


def _create(path: str, nbytes: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.posix_fallocate(fd, 0, nbytes)  # the pages now, or ENOSPC now
        return mmap.mmap(fd, nbytes)
    except BaseException:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


def _map(path: str, nbytes: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)


def allocate(comm, count: Any, dtype: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """This rank's array of ``count`` elements of ``dtype`` and every rank's part as
    bytes; collective over ``comm``, whose ranks must all be on this host and ask for the
    same count and dtype.  Any rank's failure raises the same error on every rank."""
    error: BaseException | None = None
    checked: tuple[int, np.dtype] | None = None
    try:
        checked = _check_request(count, dtype)
    except (TypeError, ValueError) as exc:
        error = exc
    _all_ranks(comm, "the request", error, ValueError)
    assert checked is not None  # no rank failed, this one included
    length, kind = checked
    asked = comm.allgather((length, kind.str))
    if len(set(asked)) > 1:
        shown = ", ".join(f"rank {r}: {c} x {np.dtype(d)}" for r, (c, d) in enumerate(asked))
        raise ValueError(f"ring.mpi shared_buffer: every rank must ask the same ({shown})")
    MPI = importlib.import_module("mpi4py.MPI")
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    on_host = local.Get_size()
    local.Free()
    if on_host != comm.Get_size():
        raise ValueError(
            f"ring.mpi shared_buffer: the ring's {comm.Get_size()} ranks are not all on one "
            f"host (this host has {on_host}); shared buffers need every rank on one host"
        )
    nbytes = max(1, length * kind.itemsize)  # an empty mapping is not allowed
    directory = ""
    try:
        directory = shared_directory()
    except ValueError as exc:
        error = exc
    _all_ranks(comm, "choosing where to make the parts", error, ValueError)
    remove_stale(directory)
    path = os.path.join(directory, f"{_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
    mine: mmap.mmap | None = None
    made = False
    try:
        try:
            mine = _create(path, nbytes)
            made = True
        except OSError as exc:
            error = OSError(exc.errno, f"{exc.strerror} (making {nbytes} bytes in {path})")
        _all_ranks(comm, "making each rank's part", error)
        paths = comm.allgather(path)
        maps: list[Any] = []
        try:
            maps = [mine if p == comm.Get_rank() else _map(q, nbytes) for p, q in enumerate(paths)]
        except OSError as exc:
            error = exc
        _all_ranks(comm, "mapping the other ranks' parts", error)
    finally:
        if made:
            os.unlink(path)  # every rank has mapped it (or none will): the mappings stay
    array = np.frombuffer(maps[comm.Get_rank()], kind, length)
    return array, [np.frombuffer(m, np.uint8, nbytes) for m in maps]


def run_shared(ranged: tuple, ufunc, nodes: int, barrier) -> None:
    """Apply this rank's operations inside its range (:func:`ring.host.moves.run_ranged`),
    then wait for every rank's (``barrier``)."""
    run_ranged(ranged, ufunc, nodes, nvtx.pop)
    barrier()


def bind_shared(rank: int, steps, memory, dtype, ufunc, average: bool, barrier):
    """A ready call of ``steps`` on the shared ``memory`` (:func:`run_shared` with its
    arguments), or None when the plan cannot be read by position.  Tiles are the cpu
    backend's (:func:`ring.host.positions.tile_elements`)."""
    positions = by_position(steps)
    if positions is None:
        return None
    length, nodes = steps.length, steps.nodes
    tile = tile_elements(dtype)
    views = [m[: length * dtype.itemsize].view(dtype) for m in memory]
    granule = max(1, _GRANULE_BYTES // dtype.itemsize)
    lo, hi = slice_bounds(length, nodes, granule)[rank]
    slots = scratch_slots(1, nodes, tile, dtype)[0] if positions.uses_scratch else None
    tiles = tile_operations(positions, lo, hi, tile, views, slots, average)
    operations = [operation for tile_ops in tiles for operation in tile_ops]
    push = nvtx.pusher(f"{steps.algorithm} by position rank {rank}")
    return partial(run_shared, ((push, operations),), ufunc, nodes, barrier)


class SharedArrays:
    """A ring's shared allocations, by the id of the array each rank was given."""

    def __init__(self, rank: int, nodes: int):
        self.rank, self.nodes = rank, nodes
        self.blocks: dict[int, SharedBlock] = {}
        self.made = 0  # allocations asked for

    def clear(self) -> None:
        self.blocks.clear()

    def allocate(self, comm, count: Any, dtype: Any, abort) -> np.ndarray:
        """:func:`allocate`, kept by its array's id until the array is dropped; an
        interruption between the ranks' exchanges calls ``abort`` (the ring's), which ends
        the job (the other ranks would wait forever)."""
        self.made += 1  # on every rank alike, failed or not: the allocation's number
        try:
            array, memory = allocate(comm, count, dtype)
        except Exception:
            raise  # raised alike on every rank
        except BaseException:
            abort("shared_buffer", "between the ranks' exchanges")
            raise
        key, blocks = id(array), self.blocks
        forget = lambda _ref: blocks.pop(key, None)  # noqa: E731
        blocks[key] = SharedBlock(weakref.ref(array, forget), self.made, memory, {})
        return array

    def block(self, buffers) -> SharedBlock | None:
        """The allocation ``buffers`` holds this rank's array of, if it does."""
        if not self.blocks or type(buffers) is not list or len(buffers) != 1:
            return None
        block = self.blocks.get(id(buffers[0]))
        return block if block is not None and block.array() is buffers[0] else None

    def program(self, form, buf, block: SharedBlock, ufunc, barrier):
        """A call of ``form`` (:class:`ring.mpi.agree.CallForm`) on ``block``'s array
        ``buf``, ready to run (:func:`bind_shared`), made on the form's first call; None
        when its plan cannot be read by position."""
        kept = block.programs.get(id(form))
        if kept is not None and kept[0] is form:
            return kept[1]
        steps = form_plan(form, self.nodes, buf)
        run = bind_shared(self.rank, steps, block.memory, buf.dtype, ufunc, form.average, barrier)
        if len(block.programs) >= _KEPT:  # forms the ring no longer keeps
            block.programs.clear()
        block.programs[id(form)] = (form, run)
        return run
