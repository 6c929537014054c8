"""The threaded NumPy backend: one persistent worker thread per logical node.

All nodes share one address space, so a "link" is a node reading a peer's array at the
range the plan names (:mod:`ring.schedule`; any algorithm, nothing else); reductions are
NumPy ufuncs with ``out=``, which release the GIL on large ranges so nodes really run in
parallel.  Plans that land data in scratch get one scratch array per node.

The threads, how they wait for each other and how a node runs its steps:
:mod:`ring.cpu.crew`; what a step does to the arrays: :mod:`ring.host`.

A call of at most ``inline_bytes`` bytes per node (default :data:`INLINE_BYTES`) runs the
same plan on the calling thread instead, node after node within each step
(:meth:`~ring.cpu.crew.Crew.run_inline`): below it, waking N threads costs more than the
work they share.  ``inline_bytes=0`` always uses the threads.

``algorithm="auto"`` plans by measuring (:mod:`ring.cpu.planning`, :mod:`ring.planning`): the
first calls of a call shape try the algorithms the decision table leaves in, by either
executor, inline and on the workers, and the fastest stays; ``planning="estimate"`` runs the
table's pick with the default executor and threshold, measuring nothing.

``executor="slices"`` runs the plan by position instead (:mod:`ring.host.positions`): the caller
and some workers each take a slice of the positions and apply every node's operations to it,
tile by tile, with no wait between threads; bit for bit the result of the default,
``"nodes"`` (one thread per node, steps synchronised as above).

Every call ends when the last node to finish wakes the caller once, so consecutive calls
never overlap.  A call that does not complete (a worker raised, or the caller was
interrupted, e.g. by Ctrl-C) stops and joins every worker before the exception reaches the
caller, and leaves the communicator closed: a later call can never see a stale signal.
A call run inline that does not complete ends the same way.  The threads share state with
the communicator only through :class:`~ring.cpu.crew.Crew`, so a communicator dropped
without :meth:`CpuCommunicator.close` is collected and its finalizer stops its threads.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import nvtx
from ..communicator import (
    Call,
    CommunicatorClosedError,
    RingCommunicator,
    check_buffer_list,
    check_nodes,
    flattened,
    normalized_op,
    refuse_gpu_options,
    track,
    validate_buffers,
)
from ..host import positions
from ..host.moves import Bound
from ..nvtx import Pushers
from ..ops import AVERAGING, resolve_op
from ..planning.candidates import auto_generation, resolve_algorithm
from ..planning.race import Trial, check_planning
from ..schedule import (
    AUTO,
    COLLECTIVES,
    EXECUTORS,
    Plan,
    check_algorithm,
    check_algorithm_options,
    check_collective,
    plan_for,
)
from ..schedule.steps import check_int, chunk_range
from .crew import Crew
from .planning import Planner

__all__ = [
    "EXECUTORS",
    "INLINE_BYTES",
    "SYNC_MODES",
    "CommunicatorClosedError",
    "CpuCommunicator",
    "CpuOptions",
    "check_call",
    "check_executor",
    "check_sync",
    "communicator_options",
]

SYNC_MODES = ("pairwise", "barrier")
_OPTIONS = frozenset(
    {"sync", "algorithm", "segment_bytes", "group_size", "inline_bytes", "executor", "planning"}
)
# A call's options that auto's plan decides, not the algorithm's own.
_PLANNED_OPTIONS = frozenset({"algorithm", "inline_bytes", "executor", "planning"})
# Calls of at most this many bytes per node run on the calling thread (inline_bytes) unless
# the caller says otherwise or auto measures where this machine's crossover lies: a
# starting guess (below it, waking the workers costs more than the second core's share of
# the memory bandwidth gives back; python -m ring.bench --inline-bytes 64M,0 measures it).
INLINE_BYTES = 4 << 20


def check_sync(sync: object) -> str:
    if not isinstance(sync, str) or sync not in SYNC_MODES:
        raise ValueError(f"unknown sync {sync!r}: expected one of {', '.join(SYNC_MODES)}")
    return sync


def check_executor(executor: object) -> str:
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    return executor


def _check_options(options: dict, nodes: int, collective: str | None = None) -> tuple:
    """(sync, algorithm, the algorithm's options, inline_bytes, executor, planning), or one
    line saying what is wrong."""
    unknown = set(options) - _OPTIONS
    if unknown:
        refuse_gpu_options("cpu", unknown)
        raise TypeError(
            f"unknown option(s) for backend 'cpu': {', '.join(sorted(unknown))} "
            f"(options: {', '.join(sorted(_OPTIONS))})"
        )
    sync = check_sync(options.get("sync", "pairwise"))
    algorithm = check_algorithm(options.get("algorithm", "ring"), collective)
    extra = {k: v for k, v in options.items() if k in ("segment_bytes", "group_size")}
    inline = options.get("inline_bytes")
    inline = INLINE_BYTES if inline is None else check_int("inline_bytes", inline, 0)
    executor = check_executor(options.get("executor") or "nodes")
    planning = check_planning(options.get("planning", "measure"))
    extra = check_algorithm_options(algorithm, nodes, extra)
    return sync, algorithm, extra, inline, executor, planning


def _algorithm_options(call: Call) -> dict:
    """A call's options that the algorithm takes (segment_bytes, group_size): the rest
    say what runs, which auto's plan decides when it measures."""
    return {k: v for k, v in call.options.items() if k not in _PLANNED_OPTIONS}


def check_call(name: str, buffers: Sequence[np.ndarray], op: str | None, **options) -> Call:
    """Validate a call's options, buffers and op before any thread is woken, so bad input
    leaves every buffer untouched.  Every collective but all_gather reduces, so ``op``
    must name an op (None is not one)."""
    check_collective(name)
    nodes = check_buffer_list(buffers)
    buffers, op = flattened(list(buffers)), normalized_op(op)
    return _checked_call(name, buffers, op, _call_options(options, nodes, name))


def _call_options(options: dict, nodes: int, name: str) -> dict:
    """A call's options, checked for ``name``, as :meth:`CpuCommunicator.execute` reads them:
    an executor, threshold or planning the call does not give is the communicator's."""
    _, algorithm, extra, inline, executor, planning = _check_options(options, nodes, name)
    given = {"inline_bytes": inline, "executor": executor, "planning": planning}
    return {"algorithm": algorithm, **extra} | {
        k: v for k, v in given.items() if options.get(k) is not None
    }


def _checked_call(name: str, buffers: Sequence[np.ndarray], op: str | None, options: dict) -> Call:
    """The call, once its buffers and op pass (its options passed already)."""
    count, dtype = validate_buffers(buffers)
    ufunc = resolve_op(op, dtype) if name != "all_gather" else None
    average = ufunc is not None and op in AVERAGING
    return Call("cpu", name, buffers, op, len(buffers), options, checked=(ufunc, count, average))


@dataclass(frozen=True)
class CpuOptions:
    """A CPU communicator's options, checked (:func:`communicator_options`): ``None`` for an
    ``inline_bytes`` or ``executor`` not given, which ``auto`` then plans over."""

    sync: str = "pairwise"
    algorithm: str = "ring"
    algorithm_options: tuple[tuple[str, int], ...] = ()
    inline_bytes: int | None = None
    executor: str | None = None
    planning: str = "measure"

    def arguments(self) -> dict:
        """The options as :class:`CpuCommunicator` takes them."""
        return {
            "sync": self.sync,
            "algorithm": self.algorithm,
            **dict(self.algorithm_options),
            "inline_bytes": self.inline_bytes,
            "executor": self.executor,
            "planning": self.planning,
        }


def communicator_options(nodes: int, options: dict) -> CpuOptions:
    """``options`` of a CPU communicator of ``nodes`` nodes, checked once."""
    nodes = check_nodes(nodes)
    sync, algorithm, extra, inline, executor, planning = _check_options(options, nodes)
    return CpuOptions(
        sync,
        algorithm,
        tuple(sorted(extra.items())),
        inline if options.get("inline_bytes") is not None else None,
        executor if options.get("executor") else None,
        planning,
    )


def _cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    getter = getattr(os, "sched_getaffinity", None)
    return len(getter(0)) if getter is not None else os.cpu_count() or 1


class CpuCommunicator(RingCommunicator):
    """Owns ``nodes`` worker threads and runs collectives on lists of NumPy arrays, by
    ``algorithm`` (see :data:`ring.schedule.ALGORITHMS`; ``segment_bytes`` and
    ``group_size`` are its options) unless a call names another.  Calls of at most
    ``inline_bytes`` bytes per node (default :data:`INLINE_BYTES`; 0: none) run on the
    calling thread, without waking the workers.  ``executor="slices"``: larger calls run by
    position on the caller and up to min(N, cores) - 1 workers (:meth:`threads_for`).
    ``algorithm="auto"`` measures which algorithm, executor and thread count is fastest for
    each call shape (``planning="measure"``, the default) over the executor and threshold
    the caller did not give; ``planning="estimate"`` takes the decision table's pick.

    Use it as a context manager, or call :meth:`close`; a closed communicator refuses work.
    If a worker fails mid-collective, or the caller is interrupted, every worker stops at
    its next wait, the threads are joined, the communicator closes, and the caller receives
    the original exception.
    """

    backend = "cpu"

    def __init__(
        self,
        nodes: int,
        *,
        sync: str = "pairwise",
        algorithm: str = "ring",
        segment_bytes: int | None = None,
        group_size: int | None = None,
        inline_bytes: int | None = None,
        executor: str | None = None,
        planning: str = "measure",
    ):
        self.nodes = check_nodes(nodes)
        options: dict[str, object] = {"sync": sync, "algorithm": algorithm}
        options |= {"segment_bytes": segment_bytes, "group_size": group_size}
        options |= {"inline_bytes": inline_bytes, "executor": executor, "planning": planning}
        given = {k: v for k, v in options.items() if v is not None}
        checked = _check_options(given, self.nodes)
        self.sync, self.algorithm, self.algorithm_options = checked[:3]
        self.inline_bytes, self.executor, self.planning = checked[3:]
        # What auto keeps as given rather than planning over it.
        self._fixed = {k: given[k] for k in ("inline_bytes", "executor") if k in given}
        self.cores = _cores()
        self._planner = Planner(self.nodes, self.sync, self.inline_bytes, self._wake_seconds)
        self._wake: float | None = None  # the workers' round trip, once measured
        # Per (key, candidate) of a trial under way: the candidate's call, bound, and the
        # checked call it was bound from.
        self._trial_bound: dict[tuple, tuple[Bound, Call]] = {}
        self._trying: dict[object, Trial] = {}  # per key, the trial its last call ran for
        # Per collective and per-call options: the checked options, and the last call, if bound.
        self._options: dict[object, dict] = {}
        self._bound: dict[object, Bound] = {}
        self._call_pushers = {name: nvtx.pusher(name) for name in COLLECTIVES}
        self._ranged = nvtx.AVAILABLE
        self._closed = False
        self._call_lock = threading.Lock()
        self._crew = Crew(self.nodes, self.sync)
        # Stops the threads of a communicator that is dropped without close().
        self._finalizer = weakref.finalize(self, self._crew.stop, False)
        track(self)

    def _after_fork_in_child(self) -> None:
        """In the child of a ``fork()``, which has none of its parent's threads: a new
        crew, whose worker threads start with its first call on them (a child may never
        make one), new locks (another thread may have held one at the fork), and none of
        the calls bound to the parent's crew.  Plans, and the parent's buffers, stay."""
        self._call_lock = threading.Lock()
        self._planner.after_fork()
        self._bound, self._trial_bound, self._trying = {}, {}, {}
        self._wake = None  # measured again, on the child's threads
        if not self._closed:
            self._finalizer.detach()
            self._crew = Crew(self.nodes, self.sync, started=False)
            self._finalizer = weakref.finalize(self, self._crew.stop, False)

    @property
    def _pushers(self) -> list[Pushers]:
        return self._crew.pushers

    @property
    def _threads(self) -> list[threading.Thread]:
        return self._crew.threads

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The worker threads, one per node, for a harness that pins them to cores (in a
        fork's child, started here if no call has started them yet)."""
        if not self._crew.started and not self._closed:
            self._crew.start_threads()
        return tuple(self._crew.threads)

    def close(self) -> None:
        """Stop and join the worker threads.  Safe to call more than once, and after a
        call that failed or was interrupted."""
        if self._closed:
            return
        self._closed = True
        with self._call_lock:
            self._bound = {}  # the bound calls' views keep their buffers alive
            self._trial_bound = {}
            self._finalizer.detach()
            self._crew.stop(True)

    def unbind(self) -> None:
        """Let go of every buffer the communicator's calls keep, and of the scratch sized to
        them (bound calls, the workers' scratch): the next call makes them again.  A
        harness calls it between sizes, so a sweep holds one point's buffers at a time."""
        with self._call_lock:
            self._bound = {}
            self._trial_bound = {}
            self._crew.forget_scratch()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"CpuCommunicator(nodes={self.nodes}, sync={self.sync!r}, "
            f"algorithm={self.algorithm!r}, inline_bytes={self.inline_bytes}, "
            f"executor={self.executor!r}, {state})"
        )

    # -- the caller's side -------------------------------------------------------------

    def _collective(
        self, name: str, buffers: Sequence[np.ndarray], op: str | None, **options
    ) -> None:
        """A call of this communicator's options, or of ``options`` given with it (what
        ``ring.allreduce`` passes on): either way a repeated call on the same buffers runs
        bound, and bad input is refused before anything is touched."""
        key = (name, *sorted(options.items())) if options else name
        self.keyed_call(key, name, buffers, op, options)

    def keyed_call(self, key: object, name: str, buffers, op: str | None, options: dict) -> None:
        """A call with ``options`` (a collective's, as given) under ``key``, a hashable name
        of the collective and those options that the caller makes once (ring.cpu.backend
        makes it once per options): a repeated call on the same buffers runs bound."""
        bound = self._bound.get(key)  # none once closed
        if (
            bound is not None
            and bound.takes(buffers, op)
            and (bound.generation < 0 or bound.generation == auto_generation())
        ):
            self._guarded(name, bound.run)  # the same call again (ring.host.moves)
            return
        trial = self._trying.get(key)
        if trial is not None and self._try_again(key, name, trial, buffers, op):
            return
        self._check_open()
        checked = self._options.get(key)
        if checked is None:  # the call's options, checked once per collective and options
            mine = {"algorithm": self.algorithm, "planning": self.planning}
            mine |= self._fixed | self.algorithm_options | options
            checked = self._options[key] = _call_options(mine, self.nodes, name)
        check_buffer_list(buffers)
        buffers = flattened(list(buffers))  # one snapshot, checked and run (see ring.api)
        op = normalized_op(op)
        self._bound.pop(key, None)
        self._execute(_checked_call(name, buffers, op, checked), bind=True, key=key)

    def _bind(
        self, call: Call, steps: Plan, executor: str, threads: int, tile: int | None = None
    ) -> Bound | None:
        """The call bound to its buffers (ring.host.moves): on the calling thread where its
        plan can be (see ring.cpu.crew.Crew.bind), else its job on the workers; ``tile``:
        bytes of a tile by slices (None: the machine's default)."""
        ufunc, _, average = call.checked
        buffers = list(call.buffers)
        if threads == 1:
            bound = self._crew.bind(call.op, buffers, ufunc, steps, average, executor, tile)
        else:
            bound = self._crew.bind_workers(
                call.op, buffers, ufunc, steps, average, threads, executor, tile
            )
        if bound is None:
            return None
        # auto's pick stands while its tables stay (ring.auto.generation); others always.
        auto_pick = call.options.get("algorithm", self.algorithm) == AUTO
        return bound._replace(generation=auto_generation() if auto_pick else -1)

    def _guarded(self, name: str, run, *args) -> None:
        """``run(*args)`` as collective ``name``, once the communicator is known open; it
        returns a worker's exception, if any.  Interrupted (Ctrl-C), wherever in this
        block, or failed anywhere: the communicator closes, so no worker outlives it.
        The outer range is pushed and popped directly (a context manager is two Python
        frames more, which at 1 KiB are a good part of a bound call), and only where a tool
        can take it (:data:`ring.nvtx.AVAILABLE`)."""
        with self._call_lock:
            if self._closed:  # a call less than _check_open() on the way through
                self._check_open()
            try:
                if self._ranged:
                    self._call_pushers[name]()
                    try:
                        error = run(*args)
                    finally:
                        nvtx.pop()
                else:
                    error = run(*args)
            except BaseException:
                self._shut_down()
                raise
            if error is not None:
                self._shut_down()
                raise error

    def _check_open(self) -> None:
        if self._closed:
            raise CommunicatorClosedError(f"{self!r} is closed: create a new communicator")

    def execute(self, call: Call) -> None:
        """Run a collective on buffers that :func:`check_call` accepted.

        Raises :class:`CommunicatorClosedError` only before any work started.
        """
        self._execute(call, bind=False)

    def _execute(self, call: Call, bind: bool, key: object = None) -> None:
        """:meth:`execute`; ``bind``: a call on the calling thread is bound to its
        buffers for the next call of the collective (and options: ``key``) to take
        (ring.host.moves).  A call that a trial of ``auto`` runs is timed for it."""
        self._check_call_backend(call)
        if call.nodes != self.nodes:
            raise ValueError(
                f"this communicator has {self.nodes} nodes but {call.nodes} buffers were given"
            )
        ufunc, count, average = call.checked
        name = call.name
        if self.nodes == 1 or count == 0:
            self._check_open()
            return
        buffers = list(call.buffers)
        steps, threads, executor, trying, tile, choice = self._plan_call(call)
        if trying is not None:
            if 1 < len(share := trying[0].share()) <= count:
                self._try_share(call, key if bind else None, trying[0], share)
            else:
                self._try(call, key if bind else None, trying, steps, threads, executor, tile)
            return
        if bind:
            bound = self._settled(key, choice, call)
            if bound is None:
                bound = self._bind(call, steps, executor, threads, tile)
            if bound is not None:
                self._bound[name if key is None else key] = bound
                self._guarded(name, bound.run)
                return
        self._guarded(name, self._run, buffers, ufunc, steps, average, threads, executor, tile)

    def _try(self, call: Call, key: object, trying: tuple, steps: Plan, threads, executor, tile):
        """A call that ``auto``'s trial runs by one of its candidates, timed for it.  Where
        it repeats on the same buffers (``key``: bound calls are kept) the candidate runs
        bound, as its plan will once chosen, so what is timed is what the plan costs."""
        trial, candidate = trying
        ufunc, _, average = call.checked
        started = time.perf_counter()  # a candidate's binding is part of what planning costs
        held = self._trial_bound.get((key, candidate)) if key is not None else None
        bound = held[0] if held is not None else None
        if bound is None or not bound.takes(call.buffers, call.op):
            bound = self._bind(call, steps, executor, threads, tile) if key is not None else None
            if bound is not None:
                self._trial_bound[(key, candidate)] = (bound, call)
        running = time.perf_counter()
        if bound is not None:
            self._guarded(call.name, bound.run)
        else:
            args = (call.buffers, ufunc, steps, average, threads, executor, tile)
            self._guarded(call.name, self._run, *args)
        done = time.perf_counter()
        if candidate in trial.warmed:  # a timed call: the run alone, as a planned call's
            trial.record(candidate, done - running)
        else:
            trial.record(candidate, done - started, run=done - running)
        self._recorded(key, trial)

    def _try_share(self, call: Call, key: object, trial: Trial, share: list[tuple]) -> None:
        """A trial's call that runs several candidates, each on an equal slice of the
        buffers (:meth:`ring.planning.race.Trial.share`), in one turn of the outer range; each
        slice's plan is made before its run is timed, and its time is scaled to the whole
        call's."""
        ufunc, count, average = call.checked
        runs = []
        for k, candidate in enumerate(share):
            lo, hi = chunk_range(count, len(share), k)
            slices = [b[lo:hi] for b in call.buffers]
            steps, threads, executor, tile = self._candidate(call, candidate, hi - lo)
            runs.append((candidate, count / (hi - lo), slices, steps, threads, executor, tile))
        seconds: dict[tuple, float] = {}
        started = time.perf_counter()
        self._guarded(call.name, self._run_share, runs, ufunc, average, seconds)
        trial.record_share(seconds, time.perf_counter() - started)
        self._recorded(key, trial)

    def _run_share(self, runs: list, ufunc, average: bool, seconds: dict) -> BaseException | None:
        """:meth:`_try_share`'s slices in turn, each one's time (scaled) into ``seconds``;
        a worker's exception is returned, and the slices after it are not run."""
        for candidate, scale, slices, steps, threads, executor, tile in runs:
            started = time.perf_counter()
            error = self._run(slices, ufunc, steps, average, threads, executor, tile)
            if error is not None:
                return error
            seconds[candidate] = (time.perf_counter() - started) * scale
        return None

    def _try_again(self, key: object, name: str, trial: Trial, buffers, op) -> bool:
        """A trial's call on the buffers its next candidate is already bound to: run bound
        and timed, without checking and planning it again, as a planned call is not (at a
        few KiB those are most of a trial call).  On the buffers another candidate is bound
        to, the next candidate's first call, planned and bound, without checking them
        again (:meth:`~ring.host.moves.Bound.takes`: they are the buffers it checked).
        False: the call takes the full path."""
        candidate = trial.next()
        if trial.pieces > 1 or not self._planner.current():
            return False
        held = None if candidate is None else self._trial_bound.get((key, candidate))
        if candidate is None or held is None:
            call = self._checked_before(key, buffers, op)
            if call is not None:
                self._execute(call, bind=True, key=key)
            return call is not None
        bound = held[0]
        if not bound.takes(buffers, op) or bound.generation != auto_generation():
            return False
        started = time.perf_counter()
        self._guarded(name, bound.run)
        trial.record(candidate, time.perf_counter() - started)
        self._recorded(key, trial)
        return True

    def _checked_before(self, key: object, buffers, op) -> Call | None:
        """The checked call of ``key``'s trial that a candidate was bound from, where these
        are its buffers still (a bound call takes them), else None."""
        for (k, _), (bound, call) in self._trial_bound.items():
            if k == key and bound.takes(buffers, op):
                return call
        return None

    def _recorded(self, key: object, trial: Trial) -> None:
        """After a trial's call: the next call of ``key`` takes :meth:`_try_again` (once
        the trial is over, the call that settles its plan)."""
        if key is not None:
            self._trying[key] = trial

    def _settled(self, key: object, choice: tuple | None, call: Call) -> Bound | None:
        """Where ``key``'s trial has just settled on ``choice``, the call its candidate
        was bound to, if it takes ``call``'s buffers still (it is what binding the plan
        again would make); the trial's state is dropped either way."""
        if key is None or self._trying.pop(key, None) is None:
            return None
        held = self._trial_bound.get((key, choice))
        self._trial_bound = {k: b for k, b in self._trial_bound.items() if k[0] != key}
        if held is not None and held[0].takes(call.buffers, call.op):
            return held[0]
        return None

    def _wake_seconds(self) -> float:
        """The workers' round trip: the least of three allreduces of one element per node
        on every worker, on private buffers (measured once per communicator)."""
        if self._wake is None:
            buffers = [np.zeros(self.nodes, np.float32) for _ in range(self.nodes)]
            steps = plan_for("allreduce", self.nodes, self.nodes, 4, "ring", {})
            crew, times = self._crew, []
            for _ in range(3):
                started = time.perf_counter()
                self._guarded("allreduce", crew.run, crew.job(buffers, np.add, steps, False))
                times.append(time.perf_counter() - started)
            self._wake = min(times)
        return self._wake

    def _plan_call(
        self, call: Call
    ) -> tuple[Plan, int, str, tuple[Trial, tuple] | None, int | None, tuple | None]:
        """The plan a checked call runs, on how many threads, by which executor, the trial
        of ``auto`` that times it with the candidate it runs (None: no trial), the bytes
        of a tile by slices (None: the machine's default), and the choice of ``auto``'s
        measuring (None: it did not plan the call)."""
        given, options = call.options, _algorithm_options(call)
        count = call.checked[1]
        itemsize = call.buffers[0].dtype.itemsize
        nbytes = count * itemsize
        algorithm = given.get("algorithm", self.algorithm)
        given_inline = given.get("inline_bytes", self._fixed.get("inline_bytes"))
        given_executor = given.get("executor", self._fixed.get("executor"))
        planning = given.get("planning", self.planning)
        inline_bytes = self.inline_bytes if given_inline is None else given_inline
        executor = given_executor or self.executor
        trying, tile, choice = None, None, None
        if algorithm == AUTO and planning == "measure":
            dtype = call.buffers[0].dtype.str
            choice, trial = self._planner.plan(
                call.name,
                dtype,
                call.op,
                nbytes,
                given_inline,
                given_executor,
                lambda a: plan_for(call.name, self.nodes, count, itemsize, a, options),
            )
            trying = None if trial is None else (trial, choice)
            algorithm, executor, inline, tile = choice
            inline_bytes = nbytes if inline else 0
        threads = self.threads_for(nbytes, inline_bytes, executor, tile)
        algorithm = resolve_algorithm(
            self.backend, call.name, self.nodes, nbytes, algorithm, inline_bytes
        )
        steps = plan_for(call.name, self.nodes, count, itemsize, algorithm, options)
        return steps, threads, executor, trying, tile, choice

    def _candidate(self, call: Call, choice: tuple, count: int) -> tuple:
        """(plan, threads, executor, tile) of a trial's ``choice`` (algorithm, executor,
        inline, tile) run on ``count`` elements of the call's buffers."""
        options = _algorithm_options(call)
        algorithm, executor, inline, tile = choice
        itemsize = call.buffers[0].dtype.itemsize
        nbytes = count * itemsize
        threads = self.threads_for(nbytes, nbytes if inline else 0, executor, tile)
        steps = plan_for(call.name, self.nodes, count, itemsize, algorithm, options)
        return steps, threads, executor, tile

    def planned(self, name: str, buffers: Sequence[np.ndarray], op: str | None) -> tuple | None:
        """(algorithm, executor, inline, tile) that ``auto`` settled on for calls like this one
        of the communicator's own options, None while it measures (or without auto)."""
        if self.algorithm != AUTO or self.planning != "measure" or not buffers:
            return None
        dtype, nbytes = buffers[0].dtype.str, buffers[0].nbytes
        fixed = self._fixed.get("inline_bytes"), self._fixed.get("executor")
        return self._planner.planned(name, dtype, op, nbytes, *fixed)

    def measuring(self, name: str, buffers: Sequence[np.ndarray], op: str | None) -> bool:
        """Whether ``auto`` is still measuring its candidates for calls like this one of the
        communicator's own options (a call on one node or no elements plans nothing)."""
        if self.nodes == 1 or not buffers or buffers[0].size == 0:
            return False
        if self.algorithm != AUTO or self.planning != "measure":
            return False
        return self.planned(name, buffers, op) is None

    def threads_for(
        self,
        nbytes: int,
        inline_bytes: int | None = None,
        executor: str | None = None,
        tile: int | None = None,
    ) -> int:
        """How many threads a call of ``nbytes`` per node runs on: 1 (the caller) up to
        ``inline_bytes``; above it, one per node (``executor="nodes"``) or one per slice,
        as many as nodes, cores and whole tiles (of ``tile`` bytes) allow (``"slices"``)."""
        inline_bytes = self.inline_bytes if inline_bytes is None else inline_bytes
        if self.nodes == 1 or nbytes <= inline_bytes:
            return 1
        if (self.executor if executor is None else executor) == "slices":
            tiles = -(-nbytes // (tile or positions.tile_bytes()))  # a slice is whole tiles
            return min(self.nodes, self.cores, tiles)
        return self.nodes

    def _run(self, buffers, ufunc, steps, average, threads, executor, tile=None):
        """Run one plan on ``threads`` threads; a worker's exception is returned."""
        crew = self._crew
        if executor == "slices":
            job = crew.slice_job(buffers, ufunc, steps, average, threads, tile)
            if job is not None:
                return crew.run_slices(job)
        job = crew.job(buffers, ufunc, steps, average)
        if threads == 1:
            crew.run_inline(job)
            return None
        return crew.run(job)

    def _shut_down(self) -> None:
        """Close after a call that did not complete: stop and join every worker."""
        self._closed = True
        self._bound = {}
        self._trial_bound = {}
        self._finalizer.detach()
        self._crew.stop(True)
