"""The MPI backend: any algorithm's plan (:mod:`ring.schedule`) executed by MPI ranks, one
buffer per rank.

Rank ``r`` of the communicator is node ``r`` of the plan.  On the plain ring, at every
step it sends the chunk its right neighbour takes from it and receives the chunk it takes
from its left neighbour, with one ``Sendrecv`` so the two directions overlap and no pair
of blocking calls can deadlock; reduce-scatter receives into a preallocated scratch
segment and accumulates with the op's ufunc and ``out=``; all-gather receives straight
into place.  Every other algorithm runs through :mod:`ring.mpi.steps`: each step's
messages posted at once, then its moves applied in order (idle steps do nothing).
Ranges travel as ``MPI.BYTE``: the reduction is NumPy's (or CuPy's), so every dtype the
CPU backend takes works, whatever datatypes the MPI library knows.

``algorithm`` (and ``group_size``, ``segment_bytes``) are per call, defaulting to the
communicator's.  ``algorithm="auto"`` plans by measuring, every rank alike
(:mod:`ring.mpi.planning`), unless the ring was made with ``planning="estimate"``.
``hierarchical`` groups the ranks of each host (``Split_type(COMM_TYPE_SHARED)``) unless
``group_size`` is given.  ``segment_bytes`` is ring-segmented's block; on the plain ring
it cuts each received chunk into segments of that size so the scratch stays in cache.

Every call first exchanges one small row per rank (:mod:`ring.mpi.exchange`): the
collective, length, dtype, op, buffer kind, algorithm, its options, how ``auto`` chose
it (and its planning budget) and whether the local buffer passed validation
(:mod:`ring.mpi.agree`).  All ranks see the same table, so a mismatch raises the same
error on every rank before any data moves.  What a call needs is made on its
first occurrence and kept: its checked form and row (per collective, op, dtype, length
and options) and its compiled steps (per plan and buffer, :mod:`ring.mpi.steps`), so a
repeated call costs little more than its messages; a call that repeats on the same buffer
object, without per-call options, is bound to it and skips even the look-ups
(:mod:`ring.mpi.bound`); a call on arrays of :meth:`MpiRing.shared_buffer` (memory all
ranks on the host map) runs by position, with no messages (:mod:`ring.mpi.shared`).  An
error *after* data started moving (a reduction that raises) cannot be undone: the rank
prints it and calls ``Abort``, so the job fails instead of its peers waiting forever; a
rank that dies outright is handled by the MPI runtime (``mpirun`` ends the job).

Use under ``mpirun -n N python ...``::

    from mpi4py import MPI
    import numpy as np, ring

    buf = np.full(1000, MPI.COMM_WORLD.rank + 1.0)
    ring.allreduce([buf], backend="mpi")            # MPI.COMM_WORLD by default
    with ring.mpi.MpiRing(MPI.COMM_WORLD) as comm:  # or a communicator of your own
        comm.allreduce([buf], "max")

CuPy buffers need a CUDA-aware MPI library (:func:`cuda_aware`): MPI gets device pointers.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from .. import nvtx
from .._optional import require
from ..communicator import (
    Call,
    RingCommunicator,
    flattened,
    normalized_op,
    refuse_gpu_options,
    track,
)
from ..ops import OPS, divide_by_nodes
from ..planning.race import check_planning
from ..schedule import AUTO, COLLECTIVES, check_collective, chunk_range
from .agree import (
    ESTIMATE,
    FIXED,
    MEASURE,
    SLOT,
    SLOT_DATA,
    UNMEASURED,
    CallForm,
    agree_on_segment,
    check_table,
    error_row,
    form_key,
    local_form,
    shared_group_size,
)
from .bound import Bound, bind
from .cuda import CUDA_AWARE_ENV, cuda_aware, import_mpi
from .exchange import Exchange
from .planning import MpiPlanner
from .shared import SharedArrays
from .steps import Programs, moves_run, run_gathered, run_steps, weakrefable

__all__ = [
    "CUDA_AWARE_ENV",
    "DEFAULT_SEGMENT_BYTES",
    "PER_CALL_OPTIONS",
    "RANKS_CHECK_TOGETHER",
    "MpiRing",
    "all_ranks_ok",
    "cache_key",
    "check_async",
    "check_call",
    "cuda_aware",
    "make_communicator",
]

# Reduce-scatter receives segments of at most this many bytes, in cache for their reduction.
DEFAULT_SEGMENT_BYTES = 1 << 20
# The options a call takes (compared across ranks in its pre-flight row), not its ring's.
PER_CALL_OPTIONS = ("segment_bytes", "algorithm", "group_size")
_OPTIONS = frozenset({"comm", *PER_CALL_OPTIONS})
# Kept forms: calls repeat a few shapes; a sweep moves on.
_KEPT = 64


_FORK_REFUSAL = "MPI cannot be used in a process made by fork()"
# The MPI process that forked this one (None: this process is none's fork): a new ring here
# would enter collectives with its parent's peers.  Whether MPI ran is asked before the fork.
_forked_from: int | None = None
_mpi_at_fork = False


def _before_fork() -> None:
    global _mpi_at_fork
    MPI = sys.modules.get("mpi4py.MPI")
    _mpi_at_fork = MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized()


def _after_fork_in_child() -> None:
    global _forked_from
    if _mpi_at_fork:
        _forked_from = os.getppid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


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
    ``planning``: how ``auto`` chooses, by measuring its candidates on the first calls of a
    shape (``"measure"``, :mod:`ring.mpi.planning`) or by the decision table alone
    (``"estimate"``).
    """

    backend = "mpi"
    _fork_refusal = _FORK_REFUSAL

    def __init__(
        self,
        comm=None,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        algorithm: str = "ring",
        group_size: int | None = None,
        planning: str = "measure",
    ):
        planning = check_planning(planning)
        if _forked_from is not None:
            raise RuntimeError(
                f"ring.mpi: this process was made by fork() of MPI process {_forked_from}: "
                f"{_FORK_REFUSAL}"
            )
        MPI = import_mpi()
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Intracomm):
            raise TypeError(f"comm must be an mpi4py intracommunicator, got {type(comm).__name__}")
        if comm == MPI.COMM_NULL:
            raise ValueError("comm is MPI.COMM_NULL")
        self._MPI = MPI
        self._user_comm = weakref.ref(comm) if weakrefable(comm) else None
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
        # Read by a bound call (ring.mpi.bound) as well as here: the lock every call holds,
        # the pre-flight exchange (ring.mpi.exchange) with this rank's slot and every rank's
        # row, the row the slot holds, each collective's range.
        self.call_lock = threading.Lock()
        self._BYTE = MPI.BYTE
        self.exchange = Exchange(self._comm, self.rank, self.nodes, SLOT, MPI)
        self._slot, self._table = self.exchange.slot, self.exchange.table
        self.slot_view, self.slot_row = self._slot.data, b""
        self.rows = self._table[:, : len(error_row("allreduce"))]
        self.algorithm = algorithm
        self.group_size = group_size
        self.planning = planning
        self._planner = MpiPlanner(self._comm, self.rank, self.nodes, MPI.MAX)
        self._forms: dict = {}
        self._bound: dict[str, Bound] = {}  # per collective: its last call, if bound
        # Per (form key, candidate) of a trial under way: the candidate's call, bound.
        self._trial_bound: dict[tuple, Bound] = {}
        self._programs = Programs(self.rank, self.nodes, MPI.BYTE, self._table[:, SLOT_DATA:])
        self._shared = SharedArrays(self.rank, self.nodes)
        self.outer_ranges = {name: nvtx.pusher(name) for name in COLLECTIVES}
        track(self)

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
        with self.call_lock:
            MPI = self._MPI
            if not MPI.Is_finalized() and self._comm != MPI.COMM_NULL:
                self.exchange.free()
                self._comm.Free()
            self.exchange.generation += 1  # a bound call made before refuses to run
            self._programs.clear()
            self._bound, self._trial_bound = {}, {}
            self._shared.clear()

    def unbind(self) -> None:
        """Let go of every buffer the ring's calls keep, and of the areas sized to them
        (kept programs' views, bound calls, landing areas): the next call makes them again.
        A harness calls it between sizes, so a sweep of several series holds one point's
        buffers at a time."""
        with self.call_lock:
            self._programs.clear()
            self._bound, self._trial_bound = {}, {}

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"MpiRing(rank={self.rank}, nodes={self.nodes}, {state})"

    # -- one call ---------------------------------------------------------------------

    def allreduce(self, buffers: Sequence, op: str = "sum") -> None:
        """As :meth:`RingCommunicator.allreduce`; a bound call is taken first, one call
        layer less, at 1 KiB a measurable share of the call (ring.mpi.bound)."""
        bound = self._bound.get("allreduce")
        if bound is None or not bound.call(buffers, op):
            self._collective("allreduce", buffers, op)

    def _collective(self, name: str, buffers: Sequence, op: str | None, **options) -> None:
        """Run one collective; ``options`` (``segment_bytes``, ``algorithm``,
        ``group_size``) override the ring's for this call (they are checked, and compared
        across ranks, with the rest of the call)."""
        if self._closed:
            raise self._closed_error()
        bound = None if options else self._bound.get(name)
        if bound is not None and bound.call(buffers, op):
            return  # the same call again (ring.mpi.bound)
        with self.call_lock:
            self.outer_ranges[name]()
            try:
                settings: tuple = (self.segment_bytes, self.algorithm, self.group_size)
                if options:  # a per-call None means the ring's own
                    given = (options.get(k) for k in PER_CALL_OPTIONS)
                    pairs = zip(given, settings, strict=True)
                    settings = tuple(d if v is None else v for v, d in pairs)
                self._call(name, buffers, op, settings, bindable=not options)
            finally:
                nvtx.pop()

    def execute(self, call: Call) -> None:
        """Run a call :func:`check_call` accepted, with its per-call options."""
        self._check_call_backend(call)
        options = {k: call.options[k] for k in PER_CALL_OPTIONS if k in call.options}
        self._collective(call.name, call.buffers, call.op, **options)

    def _call(self, name: str, buffers, op: str | None, settings: tuple, bindable: bool):
        """A call in full: checked and agreed on, then run; bound for the next call of
        ``name`` to take where it can be (a kept NumPy form, the ring's own options).
        ``auto`` with ``planning="measure"`` runs by its shape's plan, or plans."""
        self._bound.pop(name, None)
        buffers, op = flattened(buffers), normalized_op(op)  # never raise: agreed on below
        block = self._shared.block(buffers)
        shared = 0 if block is None else block.ident
        key = form_key(name, buffers, op, settings, shared)
        runs_by, planning = settings, self._planning(settings, key)
        if key is not None and self._measures(settings, key):
            planned = self._planner.planned(key)
            if planned is None:
                self._plan(name, buffers, op, settings, key, block, bindable)
                return
            runs_by = planned
        bound = self._run(name, buffers, op, settings, runs_by, key, block, bindable, planning)
        self._keep(name, bound)

    def _planning(self, settings: tuple, key: tuple | None) -> int:
        """How a call of ``settings`` chooses its algorithm (the pre-flight row's
        :data:`ring.mpi.agree.MEASURE`, ...): every rank must choose alike."""
        if type(settings[1]) is not str or settings[1] != AUTO:  # any value: checked later
            return FIXED
        if self.planning == "estimate":
            return ESTIMATE
        return MEASURE if key is not None else UNMEASURED

    def _keep(self, name: str, bound: Bound | None) -> None:
        if bound is not None:
            self._bound[name] = bound

    def planned(self, name: str, buffers, op: str | None) -> tuple | None:
        """(algorithm,) that ``auto`` settled on for calls like this one of the ring's own
        options, None while it measures (or without auto)."""
        key = self._measured_key(name, buffers, op)
        planned = None if key is None else self._planner.planned(key)
        return None if planned is None else (planned[1],)

    def measuring(self, name: str, buffers, op: str | None) -> bool:
        """Whether ``auto`` is still measuring its candidates for calls like this one of the
        ring's own options (the same answer on every rank: they plan alike)."""
        key = self._measured_key(name, buffers, op)
        return key is not None and self._planner.planned(key) is None

    def _measured_key(self, name: str, buffers, op: str | None) -> tuple | None:
        """The form key of a call like this one of the ring's own options, if it plans by
        measuring."""
        settings = (self.segment_bytes, self.algorithm, self.group_size)
        block = self._shared.block(buffers)
        key = form_key(name, buffers, op, settings, 0 if block is None else block.ident)
        return key if key is not None and self._measures(settings, key) else None

    def _measures(self, settings: tuple, key: tuple) -> bool:
        """Whether a call plans by measuring: auto on NumPy data, on more than one rank."""
        if settings[1] != AUTO or self.planning != "measure":
            return False
        return self.nodes > 1 and key[3] > 0

    def _plan(self, name: str, buffers, op, settings: tuple, key: tuple, block, bindable: bool):
        """A call of a shape still being planned (ring.mpi.planning): agreed on as auto's
        estimate when the shape is new, then run by the trial's next candidate, timed."""
        planner = self._planner
        if planner.trial(key) is None:
            buf, form = self._preflight(
                name, (*key, MEASURE), buffers, op, settings, key[5], MEASURE
            )
            # An allreduce is element-wise: its slices can run apart.  The ranks of a host
            # share its cache (host_group_size is 0 where hosts hold uneven groups: no cut).
            sharing = 0
            if name == "allreduce" and not form.device and block is None:
                sharing = self.host_group_size
            planned = planner.start(key, name, form, buf.nbytes, settings, self.abort, sharing)
            if planned is not None:
                bound = self._run(name, buffers, op, settings, planned, key, block, bindable)
                self._keep(name, bound)
                return
        runs_by, candidate = planner.next(key, settings)
        if candidate is None:  # planned: the candidates' bound calls are done with
            self._trial_bound = {k: b for k, b in self._trial_bound.items() if k[0] != key}
            self._keep(name, self._run(name, buffers, op, settings, runs_by, key, block, bindable))
            return
        if 1 < len(share := planner.share(key)) <= buffers[0].shape[0]:
            self._try_share(name, buffers[0], op, settings, key, share)
            return
        run = partial(self._try, name, buffers, op, settings, runs_by, key, block, bindable)
        planner.timed(name, key, candidate, run, self.abort)

    def _try_share(self, name: str, buf, op, settings: tuple, key: tuple, share: list) -> None:
        """A trial's call cut into one slice per candidate (:meth:`ring.planning.race.Trial.share`),
        each agreed on and run as a call of its own on its slice of every rank's buffer,
        and timed apart."""
        count = buf.shape[0]
        runs = []
        for k, candidate in enumerate(share):
            lo, hi = chunk_range(count, len(share), k)
            runs_by = (settings[0], candidate[0], settings[2])
            run = partial(self._run, name, [buf[lo:hi]], op, settings, runs_by, None, None, False)
            runs.append((candidate, count / (hi - lo), run))
        self._planner.timed_share(name, key, runs, self.abort)

    def _try(self, name, buffers, op, settings: tuple, runs_by: tuple, key, block, bindable):
        """A trial's call by candidate ``runs_by``: bound to its buffer as the plan's calls
        will be (the first call of a candidate, not timed, binds it), so what is timed is
        what the plan costs.  Every rank's call, bound or not, runs the same exchange."""
        kept = (key, runs_by)
        bound = self._trial_bound.get(kept)
        if bound is None or not bound.held(buffers, op, False):  # in _collective's lock, range
            bound = self._run(name, buffers, op, settings, runs_by, key, block, bindable)
            if bound is not None:
                self._trial_bound[kept] = bound

    def _run(
        self,
        name,
        buffers,
        op,
        settings: tuple,
        runs_by: tuple,
        key,
        block,
        bindable,
        planning: int = MEASURE,
    ) -> Bound | None:
        """The call by ``runs_by`` (``settings`` with auto resolved, or ``settings``); the
        call bound to its buffer where it may be (``bindable``: the ring's own options).
        ``planning``: how its algorithm was chosen (by measuring, unless ``_call`` says)."""
        shared = 0 if block is None else block.ident
        if key is not None:  # a form of each planning: a plan's call is no given one's
            key = (*key[:4], runs_by, key[5], planning)
        buf, form = self._preflight(name, key, buffers, op, runs_by, shared, planning)
        if form.device:
            if self.nodes > 1 and buf.shape[0] > 0:
                self._guarded(name, self._run_device, form, buf)
            return None
        run = None  # nothing moves on one rank or for an empty buffer
        if self.nodes > 1 and buf.shape[0] > 0:
            run = self._guarded(name, self._host_program, form, buf, block)
        bound = None
        if bindable and key is not None:
            bound = bind(self, name, buf, op, settings, form, run)
        if run is not None:
            self._guarded(name, run)
        return bound

    def _reduction(self, form: CallForm, xp) -> tuple:
        """(ufunc, finish) of a call of ``form`` on arrays of ``xp`` (NumPy or CuPy): the
        op's ufunc (None for all_gather) and avg's division (else None)."""
        ufunc = None
        if form.op is not None:
            ufunc = OPS[form.op] if xp is np else getattr(xp, OPS[form.op].__name__)
        finish = None
        if form.average:
            nodes = self.nodes
            finish = lambda values: divide_by_nodes(values, nodes, xp)  # noqa: E731
        return ufunc, finish

    def _host_program(self, form: CallForm, buf, block) -> partial:
        """A NumPy call's program, ready to run (on a shared ``block``, by position)."""
        ufunc, finish = self._reduction(form, np)
        if block is not None and not form.gathered:  # ring.mpi.shared
            run = self._shared.program(form, buf, block, ufunc, self._comm.Barrier)
            if run is not None:
                return run
        program = self._programs.get(form, buf, None)
        if form.gathered and not nvtx.AVAILABLE:  # no step ranges: one list of moves
            return moves_run(tuple(m for _, step in program for m in step), ufunc, finish)
        if form.gathered:
            return partial(run_gathered, program, ufunc, finish)
        return partial(run_steps, self._comm, program, ufunc, None, finish)

    def put_row(self, row: bytes) -> None:
        """Put a call's row in this rank's pre-flight slot, unless the slot holds it."""
        if row is not self.slot_row:  # calls repeat: the slot holds the row already
            self.slot_view[: len(row)] = row
            self.slot_row = row

    def _preflight(
        self, name: str, key, buffers, op: str | None, settings: tuple, shared: int, planning: int
    ):
        """This rank's buffer and the call's form, once every rank agrees; raises the same
        error on every rank otherwise, before any data moves.  ``key``: the call's
        :func:`ring.mpi.agree.form_key` and ``planning`` (how its algorithm was chosen)."""
        form: CallForm | None = self._forms.get(key) if key is not None else None
        buf: Any = None
        error = None
        if form is not None:
            buf = buffers[0]
        else:
            try:
                buf, form = local_form(
                    name,
                    buffers,
                    op,
                    settings,
                    self.nodes,
                    self.host_group_size,
                    shared,
                    planning,
                )
            except Exception as exc:  # noqa: BLE001 - reported to every rank below
                error = exc
            else:
                if key is not None:
                    if len(self._forms) >= _KEPT:
                        self._forms.clear()
                    self._forms[key] = form
        self.put_row(error_row(name) if form is None else form.row)
        sent = SLOT_DATA
        if form is not None and form.gathered:
            sent += buf.nbytes
            self.slot_view[SLOT_DATA:sent] = memoryview(buf).cast("B")
        self._agree(name, form, error, sent)
        assert form is not None  # check_table raised otherwise
        return buf, form

    def _agree(self, name: str, form: CallForm | None, error, sent: int) -> None:
        """The pre-flight exchange of the slot's first ``sent`` bytes, and its check
        (:func:`ring.mpi.agree.check_table`)."""
        try:
            self.exchange.run(sent)
            check_table(self._comm, self.rows, form, error)
        except Exception:
            raise  # raised alike on every rank, before any data moves
        except BaseException:  # noqa: BLE001 - Ctrl-C: the peers have the table, and go on
            self.abort(name)

    def _guarded(self, name: str, run, *args):
        """``run(*args)`` once data may move: a failure cannot be undone, so it aborts."""
        try:
            return run(*args)
        except BaseException:  # noqa: BLE001 - the peers are mid-collective
            self.abort(name)

    def _run_device(self, form: CallForm, buf) -> None:
        cupy = require("cupy", "the MPI backend with device buffers")
        ufunc, finish = self._reduction(form, cupy)
        program = self._programs.get(form, buf, cupy)
        with buf.device:
            # MPI reads and writes device memory directly, outside CuPy's stream order, so
            # every kernel that touched a range must be finished before MPI moves it.
            synchronize = cupy.cuda.get_current_stream().synchronize
            run_steps(self._comm, program, ufunc, synchronize, finish)
            synchronize()

    def shared_buffer(self, count: int, dtype: Any = np.float32) -> np.ndarray:
        """This rank's array of ``count`` ``dtype``, in memory every rank of the ring maps
        (collective; one host): calls on it run by position (:mod:`ring.mpi.shared`)."""
        if self._closed:
            raise self._closed_error()
        with self.call_lock:
            return self._shared.allocate(self._comm, count, dtype, self.abort)

    def abort(self, name: str, when: str = "after data started moving") -> None:
        """End the MPI job, saying which rank failed and where: its peers cannot finish."""
        sys.stderr.write(
            f"ring.mpi: rank {self.rank} failed during {name} {when}; its peers cannot "
            "finish, so the MPI job is aborted:\n" + traceback.format_exc()
        )
        sys.stderr.flush()
        self._MPI.COMM_WORLD.Abort(1)


# -- the entry points ring.api calls ------------------------------------------------------


# ring.api: a rank's out-of-place arguments are refused inside the call (ring.place.Refused),
# where every rank raises together.
RANKS_CHECK_TOGETHER = True


def all_ranks_ok(ring: MpiRing, ok: bool) -> bool:
    """Whether ``ok`` holds on every rank of ``ring`` (collective; a rank interrupted in it
    ends the job, as one interrupted in a call does)."""
    try:
        return bool(ring.comm.allreduce(int(ok), op=ring._MPI.MIN))
    except BaseException:
        ring.abort("a check of every rank's input", "in it")
        raise


def check_async() -> None:
    """``async_op=True`` runs MPI calls on a thread of its own (ring.work) while the caller's
    thread may call MPI too: that needs MPI_THREAD_MULTIPLE."""
    MPI = import_mpi()
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise RuntimeError(
            "async_op=True on the mpi backend needs MPI initialised with MPI_THREAD_MULTIPLE "
            "(mpi4py asks for it unless mpi4py.rc.thread_level says otherwise): call "
            "without async_op"
        )


def _check_options(options: dict) -> dict:
    unknown = set(options) - _OPTIONS
    if unknown:
        refuse_gpu_options("mpi", unknown)
        raise TypeError(f"unknown option(s) for backend 'mpi': {', '.join(sorted(unknown))}")
    return options


def check_call(name: str, buffers: Sequence, op: str | None, **options) -> Call:
    """Only the options: the buffer and the op are checked on every rank together, inside
    the call, so one rank's mistake raises on all of them instead of leaving the others
    waiting.  One buffer per rank: the ring has as many nodes as the communicator ranks."""
    check_collective(name)
    _check_options(options)
    per_call = {k: options[k] for k in PER_CALL_OPTIONS if k in options}
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
