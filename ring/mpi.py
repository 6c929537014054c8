"""The MPI backend: the ring schedule executed by MPI ranks, one buffer per rank.

Rank ``r`` of the communicator is node ``r`` of :func:`ring.schedule.ring_schedule`.  At
every step it sends the chunk its right neighbour takes from it (the neighbour's scheduled
transfer) and receives the chunk it takes from its left neighbour, with one ``Sendrecv`` so
the two directions overlap and no pair of blocking calls can deadlock.  Reduce-scatter
receives into a preallocated scratch segment and accumulates with the op's ufunc and
``out=``; all-gather receives straight into place.  Chunks travel as ``MPI.BYTE``: the
reduction is NumPy's (or CuPy's), so every dtype the CPU backend takes works, whatever
datatypes the MPI library knows.

Every call first exchanges one small row per rank (``Allgather``): the collective, length,
dtype, op, buffer kind and whether the local buffer passed validation.  All ranks see the
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

import sys
import threading
import traceback
import weakref
from collections.abc import Sequence
from typing import cast

import numpy as np

from . import nvtx_ranges
from ._optional import require
from .buffers import validate_buffers
from .communicator import Call, CommunicatorClosedError, RingCommunicator
from .mpi_agree import (
    COLLECTIVE_CODE,
    OP_CODE,
    ROW,
    ROW_FORMAT,
    STATUS,
    agree_on_segment,
    check_segment_bytes,
    dtype_code,
    mismatch,
    pack_row,
    raise_local_errors,
)
from .mpi_cuda import CUDA_AWARE_ENV, cuda_aware, device_backend, import_mpi, is_device_array
from .ops import AVERAGING, divide_by_nodes, resolve_op
from .schedule import COLLECTIVES, Plan, check_collective, plan, ring_schedule

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
_OPTIONS = frozenset({"comm", "segment_bytes"})


class MpiRing(RingCommunicator):
    """Ring collectives over the ranks of an MPI intracommunicator, one buffer per rank.

    The constructor duplicates ``comm`` (collective over ``comm``) so the ring's messages
    never match the caller's; :meth:`close` frees the duplicate and is collective too.
    Every collective must be called by all ranks, in the same order, with ``[buf]``: this
    rank's one-dimensional, contiguous buffer of the same length and dtype on every rank.

    ``segment_bytes``: reduce-scatter moves each chunk in segments of at most this size
    (0 = whole chunks); every rank must use the same value.  The constructor checks it on
    every rank together (after the collective ``Dup``), so a bad or different value on one
    rank raises the same error everywhere instead of leaving the others waiting.
    """

    backend = "mpi"

    def __init__(self, comm=None, *, segment_bytes: int = DEFAULT_SEGMENT_BYTES):
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

    def _collective(
        self, name: str, buffers: Sequence, op: str | None, segment_bytes: object = None
    ) -> None:
        """Run one collective; ``segment_bytes`` overrides the ring's for this call (it is
        checked, and compared across ranks, with the rest of the call)."""
        if self._closed:
            raise CommunicatorClosedError(f"{self!r} is closed: create a new communicator")
        if segment_bytes is None:
            segment_bytes = self.segment_bytes
        with self._call_lock:
            self._outer[name]()
            try:
                buf, ufunc, device = self._preflight(name, buffers, op, segment_bytes)
                if self.nodes == 1 or buf.shape[0] == 0:
                    return
                # Every rank checked it, and agreed on it, in the preflight.
                segment = cast(int, segment_bytes)
                try:
                    average = ufunc is not None and op in AVERAGING
                    self._run(name, buf, ufunc, device, segment, average)
                except BaseException:  # noqa: BLE001 - the peers are mid-collective
                    self._abort(name)
            finally:
                nvtx_ranges.pop()

    def execute(self, call: Call) -> None:
        """Run a call :func:`check_call` accepted, with its ``segment_bytes`` if it has one."""
        self._check_call_backend(call)
        self._collective(call.name, call.buffers, call.op, call.options.get("segment_bytes"))

    def _validate_local(self, name: str, buffers, op: str | None, segment_bytes: object):
        """This rank's buffer, reduction and buffer kind; raises on bad local input."""
        check_segment_bytes(segment_bytes)
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
        return buf, ufunc, device

    def _preflight(self, name: str, buffers, op: str | None, segment_bytes):
        """Validate locally, then agree with every rank before any data moves."""
        error: Exception | None
        try:
            buf, ufunc, device = self._validate_local(name, buffers, op, segment_bytes)
        except Exception as exc:  # noqa: BLE001 - reported to every rank below
            error = exc
            pack_row(self._row, 0, 1, COLLECTIVE_CODE[name], 0, 0, 0, 0, 0)
        else:
            error = None
            pack_row(
                self._row,
                0,
                0,
                COLLECTIVE_CODE[name],
                buf.shape[0],
                dtype_code(buf.dtype),
                OP_CODE[op] if name != "all_gather" else -1,
                int(device),
                int(segment_bytes),
            )
        self._comm.Allgather([self._row, self._BYTE], [self._table, self._BYTE])
        # Byte-wise equality of every row with ours is the fast path of the check.
        if error is None and self._table == self._row * self.nodes:
            return buf, ufunc, device
        table = np.frombuffer(self._table, dtype=np.int64).reshape(self.nodes, ROW)
        if table[:, STATUS].any():
            raise_local_errors(self._comm, table, error)
        raise mismatch(table)

    def _scratch_for(self, buf, nbytes: int, cupy=None):
        """A preallocated scratch segment of ``nbytes`` on the memory that holds ``buf``."""
        key = "NumPy" if cupy is None else ("CuPy", buf.device.id)
        scratch = self._scratch.get(key)
        if scratch is None or scratch.nbytes < nbytes:
            scratch = (np if cupy is None else cupy).empty(nbytes, dtype=np.uint8)
            self._scratch[key] = scratch
        return scratch[:nbytes].view(buf.dtype)

    def _run(self, name: str, buf, ufunc, device: bool, segment_bytes: int, average: bool) -> None:
        count, itemsize = buf.shape[0], buf.dtype.itemsize
        steps = plan(name, self.nodes, count)
        largest = steps.scratch_elements
        seg = largest
        if segment_bytes:
            seg = min(largest, max(1, segment_bytes // itemsize))
        # Every rank and step cuts ranges into the same number of segments, so sender and
        # receiver pair their messages one for one even when range lengths differ.
        segments = -(-largest // seg)
        if not device:
            scratch = None if ufunc is None else self._scratch_for(buf, seg * itemsize)
            finish = self._divider(np) if average else None
            self._steps(name, buf, ufunc, scratch, steps, (seg, segments), None, finish)
            return
        cupy = require("cupy", "the MPI backend with device buffers")
        with buf.device:
            scratch = None if ufunc is None else self._scratch_for(buf, seg * itemsize, cupy)
            # MPI reads and writes device memory directly, outside CuPy's stream order, so
            # every kernel that touched a range must be finished before MPI moves it.
            synchronize = cupy.cuda.get_current_stream().synchronize
            finish = self._divider(cupy) if average else None
            self._steps(name, buf, ufunc, scratch, steps, (seg, segments), synchronize, finish)
            synchronize()

    def _divider(self, xp):
        """``avg``'s last touch on the range a rank completes (see :mod:`ring.ops`)."""
        nodes = self.nodes
        return lambda values: divide_by_nodes(values, nodes, xp)

    def _steps(self, name, buf, ufunc, scratch, steps: Plan, cuts, synchronize, finish) -> None:
        seg, segments = cuts
        BYTE = self._BYTE
        sendrecv = self._comm.Sendrecv
        pop = nvtx_ranges.pop
        pushers = self._pushers[name]
        for t, step in enumerate(steps.node_steps(self.rank)):
            # The ring's steps hold one move and one send each.
            ((left, (a, b), _, accumulate, completes, _, _),) = step.moves
            ((right, (sa, sb)),) = step.sends
            pushers[t]()
            try:
                if synchronize is not None:
                    synchronize()
                if not accumulate:
                    sendrecv([buf[sa:sb], BYTE], right, 0, [buf[a:b], BYTE], left, 0)
                elif segments == 1:
                    incoming = scratch[: b - a]
                    sendrecv([buf[sa:sb], BYTE], right, 0, [incoming, BYTE], left, 0)
                    mine = buf[a:b]
                    ufunc(mine, incoming, out=mine)
                else:
                    self._segmented_step(buf, ufunc, scratch, step, seg, segments, synchronize)
                if finish is not None and completes:
                    finish(buf[a:b])
            finally:
                pop()

    def _segmented_step(self, buf, ufunc, scratch, step, seg, segments, synchronize):
        BYTE, sendrecv = self._BYTE, self._comm.Sendrecv
        ((left, (a, b), *_),) = step.moves
        ((right, (sa, sb)),) = step.sends
        for k in range(segments):
            lo, hi = min(a + k * seg, b), min(a + (k + 1) * seg, b)
            slo, shi = min(sa + k * seg, sb), min(sa + (k + 1) * seg, sb)
            if synchronize is not None and k:
                synchronize()  # the previous reduction still reads the scratch segment
            incoming = scratch[: hi - lo]
            sendrecv([buf[slo:shi], BYTE], right, 0, [incoming, BYTE], left, 0)
            if hi > lo:
                mine = buf[lo:hi]
                ufunc(mine, incoming, out=mine)

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
    per_call = {"segment_bytes": options["segment_bytes"]} if "segment_bytes" in options else {}
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
    # Not segment_bytes: ring.api passes it with each call, where it is compared across
    # ranks.  A key per value would let one rank make a new ring (a collective Dup) while
    # the others call the cached one, and wait forever.
    return ("mpi", comm.py2f())


def make_communicator(nodes: int, **options) -> MpiRing:
    """A new :class:`MpiRing` over ``comm`` (default ``MPI.COMM_WORLD``); collective."""
    _check_options(options)
    return MpiRing(options.get("comm"))
