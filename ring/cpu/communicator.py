"""The threaded NumPy backend: one persistent worker thread per logical node.

All nodes share one address space, so a "link" is a node reading a peer's array at the
range the plan names (:mod:`ring.schedule`; any algorithm, nothing else); reductions are
NumPy ufuncs with ``out=``, which release the GIL on large ranges so nodes really run in
parallel.  Plans that land data in scratch get one scratch array per node.

A call reads as check, plan, execute (:meth:`CpuCommunicator.keyed_call`): its inputs are
checked before any thread is woken (:mod:`ring.cpu.checks`), it is planned by its options or
by ``auto``'s measuring (:mod:`ring.cpu.planned`), and the plan runs, bound to the buffers
where the call repeats (:mod:`ring.cpu.execution`).  The threads, how they wait for each
other and how a node runs its steps: :mod:`ring.cpu.crew`; what a step does to the arrays:
:mod:`ring.host`.

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
import weakref
from collections.abc import Sequence

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
    track,
)
from ..host.moves import Bound
from ..nvtx import Pushers
from ..planning.candidates import auto_generation
from ..planning.race import Trial
from ..schedule import COLLECTIVES, EXECUTORS
from .checks import (
    INLINE_BYTES,
    SYNC_MODES,
    CpuOptions,
    call_options,
    check_call,
    check_executor,
    check_options,
    check_sync,
    checked_call,
    communicator_options,
)
from .crew import Crew
from .planned import PlannedCalls
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


def _cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    getter = getattr(os, "sched_getaffinity", None)
    return len(getter(0)) if getter is not None else os.cpu_count() or 1


class CpuCommunicator(PlannedCalls, RingCommunicator):
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
        checked = check_options(given, self.nodes)
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
        makes it once per options): a repeated call on the same buffers runs bound, as it
        was checked and planned before; any other is checked, planned and run."""
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
        call = self._checked(key, name, buffers, op, options)
        self._bound.pop(key, None)
        self._execute(call, key)

    def _checked(self, key: object, name: str, buffers, op: str | None, options: dict) -> Call:
        """The call checked, before anything is touched: its options once per ``key``
        (the communicator's, with the call's own over them), its buffers and op each time,
        on one snapshot of the caller's list (see ring.api)."""
        self._check_open()
        checked = self._options.get(key)
        if checked is None:
            mine = {"algorithm": self.algorithm, "planning": self.planning}
            mine |= self._fixed | self.algorithm_options | options
            checked = self._options[key] = call_options(mine, self.nodes, name)
        check_buffer_list(buffers)
        return checked_call(name, flattened(list(buffers)), normalized_op(op), checked)

    def execute(self, call: Call) -> None:
        """Run a collective on buffers that :func:`check_call` accepted.

        Raises :class:`CommunicatorClosedError` only before any work started.
        """
        self._execute(call)

    def _execute(self, call: Call, key: object = None) -> None:
        """Plan a checked call and run it: by a trial's candidate, timed for it, while
        ``auto`` measures; else by its plan, bound to its buffers for the next call of
        ``key`` to take where a key is given (ring.host.moves)."""
        if not self._has_work(call):
            return
        steps, threads, executor, trying, tile, choice = self._plan_call(call)
        if trying is not None:
            self._trial_call(call, key, trying, steps, threads, executor, tile)
        elif key is None or not self._run_bound(key, call, choice, steps, threads, executor, tile):
            ufunc, _, average = call.checked
            args = (list(call.buffers), ufunc, steps, average, threads, executor, tile)
            self._guarded(call.name, self._run, *args)

    def _has_work(self, call: Call) -> bool:
        """Whether a call of this communicator's backend and N has work to do: one node
        or no elements has none (a closed communicator refuses it all the same)."""
        self._check_call_backend(call)
        if call.nodes != self.nodes:
            raise ValueError(
                f"this communicator has {self.nodes} nodes but {call.nodes} buffers were given"
            )
        if self.nodes == 1 or call.checked[1] == 0:
            self._check_open()
            return False
        return True

    def _run_bound(self, key: object, call: Call, choice, steps, threads, executor, tile) -> bool:
        """Run the call bound, and keep it for the next call of ``key``: the bound call a
        trial that just settled on ``choice`` holds, else the plan bound anew.  False:
        the plan cannot be bound (the call runs unbound)."""
        bound = self._settled(key, choice, call)
        if bound is None:
            bound = self._bind(call, steps, executor, threads, tile)
        if bound is None:
            return False
        self._bound[key] = bound
        self._guarded(call.name, bound.run)
        return True
