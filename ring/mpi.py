"""The MPI backend: any algorithm's plan (:mod:`ring.schedule`) executed by MPI ranks, one
buffer per rank.

Rank ``r`` of the communicator is node ``r`` of the plan.  On the plain ring, at every
step it sends the chunk its right neighbour takes from it and receives the chunk it takes
from its left neighbour, with one ``Sendrecv`` so the two directions overlap and no pair
of blocking calls can deadlock; reduce-scatter receives into a preallocated scratch
segment and accumulates with the op's ufunc and ``out=``; all-gather receives straight
into place.  Every other algorithm runs through :mod:`ring.mpi_steps`: each step's
messages posted at once, then its moves applied in order (idle steps do nothing).
Ranges travel as ``MPI.BYTE``: the reduction is NumPy's (or CuPy's), so every dtype the
CPU backend takes works, whatever datatypes the MPI library knows.

``algorithm`` (and ``group_size``, ``segment_bytes``) are per call, defaulting to the
communicator's.  ``hierarchical`` groups the ranks of each host
(``Split_type(COMM_TYPE_SHARED)``) unless ``group_size`` is given.  ``segment_bytes`` is
ring-segmented's block; on the plain ring it cuts each received chunk into segments of
that size so the scratch stays in cache.

Every call first exchanges one small row per rank (``Allgather``): the collective, length,
dtype, op, buffer kind, algorithm, its options and whether the local buffer passed
validation.  All ranks see the
same table, so a mismatch raises the same error on every rank before any data moves.  An
error *after* data started moving (a rank whose reduction raises) cannot be undone: the rank
prints it and calls ``Abort``, so the job fails instead of its peers waiting forever.  A rank
that dies outright is handled by the MPI runtime (``mpirun`` ends the job).

Use under ``mpirun -n N python ...``::

    from mpi4py import MPI
    import numpy as np, ring

    buf = np.full(1000, MPI.COMM_WORLD.rank + 1.0)
    ring.allreduce([buf], backend="mpi")            # MPI.COMM_WORLD by default
    with ring.mpi.MpiRing(MPI.COMM_WORLD) as comm:  # or a communicator of your own
        comm.allreduce([buf], "max")

CuPy buffers need a CUDA-aware MPI library (see :func:`cuda_aware`); they are handed to MPI
as device pointers, and the reduction runs as a CuPy ufunc.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import traceback
import weakref
from collections.abc import Sequence

import numpy as np

from . import nvtx_ranges
from ._optional import require
from .buffers import validate_buffers
from .communicator import Call, CommunicatorClosedError, RingCommunicator
from .mpi_agree import (
    ALGORITHM_CODE,
    COLLECTIVE_CODE,
    OP_CODE,
    ROW,
    ROW_FORMAT,
    STATUS,
    agree_on_segment,
    dtype_code,
    mismatch,
    pack_row,
    raise_local_errors,
    resolve_call,
    shared_group_size,
)
from .mpi_cuda import CUDA_AWARE_ENV, cuda_aware, device_backend, import_mpi, is_device_array
from .mpi_steps import (
    StepBuffers,
    landing_elements,
    run_ring_steps,
    run_step,
    scratch_elements,
)
from .ops import AVERAGING, divide_by_nodes, resolve_op
from .schedule import (
    COLLECTIVES,
    Plan,
    check_collective,
    plan,
    plan_for,
    ring_schedule,
)

__all__ = [
    "CUDA_AWARE_ENV",
    "DEFAULT_SEGMENT_BYTES",
    "MpiRing",
    "cache_key",
    "check_call",
    "cuda_aware",
    "make_communicator",
]

# Reduce-scatter receives each chunk in segments of at most this many bytes, so the scratch
# segment stays in cache between the receive and the reduction that reads it.
DEFAULT_SEGMENT_BYTES = 1 << 20
_COLLECTIVES = COLLECTIVES
_OPTIONS = frozenset({"comm", "segment_bytes", "algorithm", "group_size"})
# The options a call takes (compared across ranks in its pre-flight row).
_PER_CALL = ("segment_bytes", "algorithm", "group_size")


class MpiRing(RingCommunicator):
    """Ring collectives over the ranks of an MPI intracommunicator, one buffer per rank.

    The constructor duplicates ``comm`` (collective over ``comm``) so the ring's messages
    never match the caller's; :meth:`close` frees the duplicate and is collective too.
    Every collective must be called by all ranks, in the same order, with ``[buf]``: this
    rank's one-dimensional, contiguous buffer of the same length and dtype on every rank.

    ``segment_bytes``: reduce-scatter moves each chunk in segments of at most this size
    (0 = whole chunks), and ring-segmented's block (0 = its default); every rank must use
    the same value.  The constructor checks it on every rank together (after the
    collective ``Dup``), so a bad or different value on one rank raises the same error
    everywhere instead of leaving the others waiting.  ``algorithm`` and ``group_size``
    are the calls' defaults; they are checked, and compared across ranks, with each call.
    """

    backend = "mpi"

    def __init__(
        self,
        comm=None,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        algorithm: str = "ring",
        group_size: int | None = None,
    ):
        MPI = import_mpi()
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Intracomm):
            raise TypeError(f"comm must be an mpi4py intracommunicator, got {type(comm).__name__}")
        if comm == MPI.COMM_NULL:
            raise ValueError("comm is MPI.COMM_NULL")
        self._MPI = MPI
        self._user_comm = weakref.ref(comm) if _weakrefable(comm) else None
        self._comm = comm.Dup()
        try:
            self.segment_bytes = agree_on_segment(self._comm, segment_bytes)
            # Collective, so done for every ring: hierarchical's groups by default.
            self.host_group_size = shared_group_size(self._comm)
        except Exception:
            self._comm.Free()
            raise
        self.rank = self._comm.Get_rank()
        self.nodes = self._comm.Get_size()
        self._closed = False
        self._call_lock = threading.Lock()
        self._BYTE = MPI.BYTE
        self._row = bytearray(ROW_FORMAT.size)
        self._table = bytearray(ROW_FORMAT.size * self.nodes)
        self._scratch: dict = {}
        self.algorithm = algorithm
        self.group_size = group_size
        self._plan_pushers: dict = {}

        schedule = ring_schedule(self.nodes)
        self.left = schedule.left(self.rank)
        self.right = schedule.right(self.rank)
        # Per collective, the NVTX range pusher of each of this rank's steps.
        self._pushers = {
            name: tuple(
                nvtx_ranges.pusher(f"{step.name} rank {self.rank}")
                for step in plan(name, self.nodes, 0).node_steps(self.rank)
            )
            for name in _COLLECTIVES
        }
        self._outer = {name: nvtx_ranges.pusher(name) for name in _COLLECTIVES}

    @property
    def comm(self):
        """The ring's own duplicate of the communicator it was given."""
        return self._comm

    @property
    def closed(self) -> bool:
        if self._closed:
            return True
        # The caller freed the communicator we were made from: a new one may reuse its
        # handle, so a cache keyed on the handle must not hand this ring out again.
        user = self._user_comm() if self._user_comm is not None else None
        return self._user_comm is not None and (user is None or user == self._MPI.COMM_NULL)

    def close(self) -> None:
        """Free the duplicated communicator (collective).  Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        with self._call_lock:
            MPI = self._MPI
            if not MPI.Is_finalized() and self._comm != MPI.COMM_NULL:
                self._comm.Free()
            self._scratch = {}

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"MpiRing(rank={self.rank}, nodes={self.nodes}, {state})"

    # -- one call ---------------------------------------------------------------------

    def _collective(self, name: str, buffers: Sequence, op: str | None, **options) -> None:
        """Run one collective; ``options`` (``segment_bytes``, ``algorithm``,
        ``group_size``) override the ring's for this call (they are checked, and compared
        across ranks, with the rest of the call)."""
        if self._closed:
            raise CommunicatorClosedError(f"{self!r} is closed: create a new communicator")
        settings = {
            "segment_bytes": self.segment_bytes,
            "algorithm": self.algorithm,
            "group_size": self.group_size,
        }
        settings.update((k, v) for k, v in options.items() if v is not None)
        with self._call_lock:
            self._outer[name]()
            try:
                buf, ufunc, device, how = self._preflight(name, buffers, op, settings)
                if self.nodes == 1 or buf.shape[0] == 0:
                    return
                try:
                    average = ufunc is not None and op in AVERAGING
                    self._run(name, buf, ufunc, device, how, average)
                except BaseException:  # noqa: BLE001 - the peers are mid-collective
                    self._abort(name)
            finally:
                nvtx_ranges.pop()

    def execute(self, call: Call) -> None:
        """Run a call :func:`check_call` accepted, with its per-call options."""
        self._check_call_backend(call)
        options = {k: call.options[k] for k in _PER_CALL if k in call.options}
        self._collective(call.name, call.buffers, call.op, **options)

    def _validate_local(self, name: str, buffers, op: str | None, settings: dict):
        """This rank's buffer, reduction, buffer kind and (algorithm, segment_bytes,
        group_size); raises on bad local input."""
        how = resolve_call(name, settings, self.nodes, self.host_group_size)
        if is_device_array(buffers) or isinstance(buffers, np.ndarray):
            raise TypeError("pass this rank's buffer in a list: [buf]")
        if isinstance(buffers, Sequence) and not isinstance(buffers, (str, bytes)):
            if len(buffers) != 1:
                raise ValueError(
                    f"the MPI backend takes one buffer per rank ([buf]), got {len(buffers)}"
                )
            device = is_device_array(buffers[0])
        else:
            device = False
        if device:
            cupy, array_type = device_backend()
            validate_buffers(buffers, array_type=array_type, kind="CuPy")
        else:
            validate_buffers(buffers)
        buf = buffers[0]
        # all_gather reduces nothing; the others need an op, and None is not one.
        ufunc = resolve_op(op, buf.dtype) if name != "all_gather" else None
        if device and ufunc is not None:
            ufunc = getattr(cupy, ufunc.__name__)
        return buf, ufunc, device, how

    def _preflight(self, name: str, buffers, op: str | None, settings: dict):
        """Validate locally, then agree with every rank before any data moves."""
        error: Exception | None
        try:
            buf, ufunc, device, how = self._validate_local(name, buffers, op, settings)
        except Exception as exc:  # noqa: BLE001 - reported to every rank below
            error = exc
            pack_row(self._row, 0, 1, COLLECTIVE_CODE[name], 0, 0, 0, 0, 0, 0, 0)
        else:
            error = None
            algorithm, segment, group = how
            pack_row(
                self._row,
                0,
                0,
                COLLECTIVE_CODE[name],
                buf.shape[0],
                dtype_code(buf.dtype),
                OP_CODE[op] if name != "all_gather" else -1,
                int(device),
                segment,
                ALGORITHM_CODE[algorithm],
                group,
            )
        self._comm.Allgather([self._row, self._BYTE], [self._table, self._BYTE])
        # Byte-wise equality of every row with ours is the fast path of the check.
        if error is None and self._table == self._row * self.nodes:
            return buf, ufunc, device, how
        table = np.frombuffer(self._table, dtype=np.int64).reshape(self.nodes, ROW)
        if table[:, STATUS].any():
            raise_local_errors(self._comm, table, error)
        raise mismatch(table)

    def _scratch_for(self, buf, nbytes: int, cupy=None, role: str = "landing"):
        """A preallocated scratch area of ``nbytes`` on the memory that holds ``buf``:
        ``landing`` for received ranges, ``algorithm`` for the plan's own scratch."""
        key = (role, "NumPy") if cupy is None else (role, "CuPy", buf.device.id)
        scratch = self._scratch.get(key)
        if scratch is None or scratch.nbytes < nbytes:
            scratch = (np if cupy is None else cupy).empty(nbytes, dtype=np.uint8)
            self._scratch[key] = scratch
        return scratch[:nbytes].view(buf.dtype)

    def _run(self, name: str, buf, ufunc, device: bool, how: tuple, average: bool) -> None:
        algorithm, segment_bytes, group = how
        cupy = require("cupy", "the MPI backend with device buffers") if device else None
        xp = np if cupy is None else cupy
        finish = self._divider(xp) if average else None
        with buf.device if cupy is not None else contextlib.nullcontext():
            # MPI reads and writes device memory directly, outside CuPy's stream order, so
            # every kernel that touched a range must be finished before MPI moves it.
            synchronize = cupy.cuda.get_current_stream().synchronize if cupy else None
            if algorithm == "ring":
                self._run_ring(name, buf, ufunc, cupy, segment_bytes, synchronize, finish)
            else:
                options = {"segment_bytes": segment_bytes, "group_size": group}
                steps = plan_for(
                    name, self.nodes, buf.shape[0], buf.dtype.itemsize, algorithm, options
                )
                self._run_plan(name, buf, ufunc, cupy, steps, synchronize, finish)
            if synchronize is not None:
                synchronize()

    def _run_ring(self, name, buf, ufunc, cupy, segment_bytes, synchronize, finish) -> None:
        count, itemsize = buf.shape[0], buf.dtype.itemsize
        steps = plan(name, self.nodes, count)
        largest = steps.scratch_elements
        seg = largest
        if segment_bytes:
            seg = min(largest, max(1, segment_bytes // itemsize))
        # Every rank and step cuts ranges into the same number of segments, so sender and
        # receiver pair their messages one for one even when range lengths differ.
        segments = -(-largest // seg)
        scratch = None if ufunc is None else self._scratch_for(buf, seg * itemsize, cupy)
        run_ring_steps(
            self._comm,
            self._BYTE,
            steps.node_steps(self.rank),
            StepBuffers(buf, None, scratch),
            ufunc,
            (seg, segments),
            synchronize,
            finish,
            self._pushers[name],
        )

    def _run_plan(self, name, buf, ufunc, cupy, steps: Plan, synchronize, finish) -> None:
        """Any algorithm's plan, step by step (:mod:`ring.mpi_steps`)."""
        mine = steps.node_steps(self.rank)
        landing, scratch, pushers = self._plan_state(steps, mine)
        itemsize = buf.dtype.itemsize
        memory = StepBuffers(
            buf,
            self._scratch_for(buf, scratch * itemsize, cupy, "algorithm") if scratch else None,
            self._scratch_for(buf, landing * itemsize, cupy) if landing else None,
        )
        comm, byte, rank, pop = self._comm, self._BYTE, self.rank, nvtx_ranges.pop
        for push, step in zip(pushers, mine, strict=True):
            push()
            try:
                if synchronize is not None:
                    synchronize()
                run_step(comm, byte, rank, step, memory, ufunc, finish)
            finally:
                pop()

    def _plan_state(self, steps: Plan, mine: tuple) -> tuple[int, int, tuple]:
        """(landing elements, scratch elements, NVTX pushers) of this rank's steps of a
        plan, computed on its first call: calls repeat the same plans."""
        state = self._plan_pushers.get(steps)
        if state is None:
            if len(self._plan_pushers) > 64:
                self._plan_pushers.clear()
            state = self._plan_pushers[steps] = (
                landing_elements(mine, self.rank),
                scratch_elements(mine),
                tuple(nvtx_ranges.pusher(f"{s.name} rank {self.rank}") for s in mine),
            )
        return state

    def _divider(self, xp):
        """``avg``'s last touch on the range a rank completes (see :mod:`ring.ops`)."""
        nodes = self.nodes
        return lambda values: divide_by_nodes(values, nodes, xp)

    def _abort(self, name: str) -> None:
        sys.stderr.write(
            f"ring.mpi: rank {self.rank} failed during {name} after data started moving; "
            "its peers cannot finish, so the MPI job is aborted:\n" + traceback.format_exc()
        )
        sys.stderr.flush()
        self._MPI.COMM_WORLD.Abort(1)


def _weakrefable(obj) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


# -- the entry points ring.api calls ------------------------------------------------------


def _check_options(options: dict) -> dict:
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError(f"unknown option(s) for backend 'mpi': {', '.join(sorted(unknown))}")
    return options


def check_call(name: str, buffers: Sequence, op: str | None, **options) -> Call:
    """Only the options: the buffer and the op are checked on every rank together, inside
    the call, so one rank's mistake raises on all of them instead of leaving the others
    waiting.  One buffer per rank: the ring has as many nodes as the communicator ranks."""
    check_collective(name)
    _check_options(options)
    per_call = {k: options[k] for k in _PER_CALL if k in options}
    return Call("mpi", name, buffers, op, 1, options=per_call)


def cache_key(nodes: int, **options) -> tuple:
    """Key under which :mod:`ring.api` caches the ring for ``comm``.

    ``nodes`` (the number of buffers this rank passed) is not part of it: a count other than
    one is reported by the collective itself, on every rank, so one rank's mistake cannot
    leave the others waiting.
    """
    _check_options(options)
    MPI = import_mpi()
    comm = options.get("comm")
    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py communicator, got {type(comm).__name__}")
    # Not the per-call options: ring.api passes them with each call, where they are
    # compared across ranks.  A key per value would let one rank make a new ring (a
    # collective Dup) while the others call the cached one, and wait forever.
    return ("mpi", comm.py2f())


def make_communicator(nodes: int, **options) -> MpiRing:
    """A new :class:`MpiRing` over ``comm`` (default ``MPI.COMM_WORLD``); collective."""
    _check_options(options)
    return MpiRing(options.get("comm"))
