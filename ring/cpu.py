"""The threaded NumPy backend: one persistent worker thread per logical node.

All nodes share one address space, so a ring "link" is node ``i`` reading node ``i - 1``'s
array at the chunk boundary the schedule names; reductions are NumPy ufuncs with ``out=``,
which release the GIL on large chunks so nodes really run in parallel.

Synchronisation uses one ``queue.SimpleQueue`` per node as a counting signal: it is
implemented in C, a blocking ``get`` costs one lock round trip like a raw lock (a
``threading.Barrier`` or ``Condition`` costs several), and a count lets a producer run
ahead of its consumer without a separate signal per step, so the state stays linear in N.

* ``sync="pairwise"``: after step ``t`` node ``i`` puts a token in ``ready[i]``; before
  step ``t + 1`` node ``i + 1`` takes one.  Node ``i`` waits only for its left neighbour,
  as the original study's GPU code does with events; non-neighbours run ahead.  This is
  enough: node ``i`` at step ``t`` transitively waits for node ``i + 1`` at step
  ``t - (N - 1)``, the last step at which node ``i + 1`` reads a chunk that node ``i``
  overwrites at step ``t`` (``tests/test_schedule.py`` checks every hazard).
* ``sync="barrier"``: after every step all nodes wait for each other, as the original
  study's CPU code does with ``std::barrier``.  The last node to arrive puts a token in
  every other node's ``ready`` queue.

Every call ends when the last node to finish wakes the caller once, so consecutive calls
never overlap.  A call that does not complete (a worker raised, or the caller was
interrupted, e.g. by Ctrl-C) stops and joins every worker before the exception reaches the
caller, and leaves the communicator closed: a later call can never see a stale signal.
The threads share state with the communicator only through :class:`_Crew`, so a
communicator dropped without :meth:`CpuCommunicator.close` is collected and its finalizer
stops its threads.
"""

from __future__ import annotations

import itertools
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import nvtx_ranges
from .buffers import validate_buffers
from .communicator import (
    Call,
    CommunicatorClosedError,
    RingCommunicator,
    check_buffer_list,
    check_nodes,
)
from .ops import AVERAGING, divide_by_nodes, resolve_op
from .schedule import COLLECTIVES, Plan, check_collective, plan, ring_schedule

__all__ = [
    "SYNC_MODES",
    "CommunicatorClosedError",
    "CpuCommunicator",
    "cache_key",
    "check_call",
    "check_sync",
    "make_communicator",
]

SYNC_MODES = ("pairwise", "barrier")
_OPTIONS = frozenset({"sync"})


class _Aborted(Exception):
    """Raised inside a healthy worker when another worker failed."""


_STOP = None  # what a worker's start queue receives instead of a job when it must exit


def check_sync(sync: object) -> str:
    if not isinstance(sync, str) or sync not in SYNC_MODES:
        raise ValueError(f"unknown sync {sync!r}: expected one of {', '.join(SYNC_MODES)}")
    return sync


def _check_options(options: dict) -> str:
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError(f"unknown option(s) for backend 'cpu': {', '.join(sorted(unknown))}")
    return check_sync(options.get("sync", "pairwise"))


def check_call(name: str, buffers: Sequence[np.ndarray], op: str | None, **options) -> Call:
    """Validate a call's options, buffers and op before any thread is woken, so bad input
    leaves every buffer untouched.  Every collective but all_gather reduces, so ``op``
    must name an op (None is not one)."""
    check_collective(name)
    _check_options(options)
    count, dtype = validate_buffers(buffers)
    ufunc = resolve_op(op, dtype) if name != "all_gather" else None
    average = ufunc is not None and op in AVERAGING
    nodes = check_buffer_list(buffers)
    return Call("cpu", name, buffers, op, nodes, checked=(ufunc, count, average))


def cache_key(nodes: int, **options) -> tuple:
    """The key under which :func:`ring.get_communicator` caches a CPU communicator."""
    return ("cpu", check_nodes(nodes), _check_options(options))


def make_communicator(nodes: int, **options) -> CpuCommunicator:
    """A new :class:`CpuCommunicator` (the factory :mod:`ring.api` dispatches to)."""
    _check_options(options)
    return CpuCommunicator(nodes, **options)


# Per-step NVTX ranges are named for communicators up to this size.  A call makes
# 2N(N - 1) step ranges, more than a profile can show beyond this; above it only the call's
# outer range is recorded, and every node shares one table of no-op ranges, so the state
# stays linear in N.
STEP_RANGE_MAX_NODES = 64

Pushers = dict[str, tuple[Callable[[], Any], ...]]


def _no_range() -> None:
    """Push and pop of a step above STEP_RANGE_MAX_NODES: records nothing."""


def _pushers(nodes: int) -> list[Pushers]:
    """Per node and collective, the NVTX range pusher of each of the node's steps."""
    if nodes > STEP_RANGE_MAX_NODES:
        shared = {c: (_no_range,) * plan(c, nodes, 0).steps for c in COLLECTIVES}
        return [shared] * nodes
    return [
        {
            c: tuple(nvtx_ranges.pusher(s.name) for s in plan(c, nodes, 0).node_steps(node))
            for c in COLLECTIVES
        }
        for node in range(nodes)
    ]


class CpuCommunicator(RingCommunicator):
    """Owns ``nodes`` worker threads and runs ring collectives on lists of NumPy arrays.

    Use it as a context manager, or call :meth:`close`; a closed communicator refuses work.
    If a worker fails mid-collective, or the caller is interrupted, every worker stops at
    its next wait, the threads are joined, the communicator closes, and the caller receives
    the original exception.
    """

    backend = "cpu"

    def __init__(self, nodes: int, *, sync: str = "pairwise"):
        self.nodes = check_nodes(nodes)
        self.sync = check_sync(sync)
        self._closed = False
        self._call_lock = threading.Lock()
        self._crew = _Crew(self.nodes, self.sync)
        # Stops the threads of a communicator that is dropped without close().
        self._finalizer = weakref.finalize(self, self._crew.stop, False)

    @property
    def _pushers(self) -> list[Pushers]:
        return self._crew.pushers

    @property
    def _threads(self) -> list[threading.Thread]:
        return self._crew.threads

    def close(self) -> None:
        """Stop and join the worker threads.  Safe to call more than once, and after a
        call that failed or was interrupted."""
        if self._closed:
            return
        self._closed = True
        with self._call_lock:
            self._finalizer.detach()
            self._crew.stop(True)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"CpuCommunicator(nodes={self.nodes}, sync={self.sync!r}, {state})"

    # -- the caller's side -------------------------------------------------------------

    def _collective(self, name: str, buffers: Sequence[np.ndarray], op: str | None) -> None:
        self._check_open()
        self.execute(check_call(name, buffers, op))

    def _check_open(self) -> None:
        if self._closed:
            raise CommunicatorClosedError(f"{self!r} is closed: create a new communicator")

    def execute(self, call: Call) -> None:
        """Run a collective on buffers that :func:`check_call` accepted.

        Raises :class:`CommunicatorClosedError` only before any work started.
        """
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
        job = (name, list(call.buffers), ufunc, plan(name, self.nodes, count), average)
        with self._call_lock:
            self._check_open()
            try:
                with nvtx_ranges.annotate(name):
                    error = self._crew.run(job)
            except BaseException:
                # Interrupted (Ctrl-C), wherever in this block: no worker may outlive it.
                self._shut_down()
                raise
            if error is not None:
                self._shut_down()
                raise error

    def _shut_down(self) -> None:
        """Close after a call that did not complete: stop and join every worker."""
        self._closed = True
        self._finalizer.detach()
        self._crew.stop(True)


class _Crew:
    """The worker threads and all they share.  It holds no reference to its communicator."""

    def __init__(self, nodes: int, sync: str):
        n = self.nodes = nodes
        self.pairwise = sync == "pairwise"
        self.pushers = _pushers(n) if n > 1 else []
        self.pop = nvtx_ranges.pop if n <= STEP_RANGE_MAX_NODES else _no_range
        # Pairwise sync is the ring's: a node's every step reads what its left neighbour
        # wrote at the step before.
        self.left = [ring_schedule(n).left(node) for node in range(n)]
        self.ready: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(n)]
        self.arrivals = [itertools.count() for _ in range(2 * (n - 1))]
        self.start: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(n)]
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        self.finished = itertools.count()
        self.fail_lock = threading.Lock()
        self.error: BaseException | None = None
        self.failed = False
        self.threads: list[threading.Thread] = []
        for node in range(n if n > 1 else 0):
            thread = threading.Thread(
                target=self.worker, args=(node,), name=f"ring-cpu-node{node}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def run(self, job) -> BaseException | None:
        """Run one collective on every node; return a worker's exception, if any.

        If the caller is interrupted while the nodes run, every waiting node is woken to
        stop; the caller then stops and joins them (:meth:`stop`) before the interruption
        propagates, so no node touches a buffer afterwards.
        """
        try:
            for start in self.start:
                start.put(job)
            self.done.get()
        except BaseException as interruption:
            self.fail(interruption)
            raise
        return self.error if self.failed else None

    def stop(self, join: bool) -> None:
        """Make every worker exit after its current step; with ``join``, wait for them."""
        self.fail(_Aborted("stopped"))
        for start in self.start:
            start.put(_STOP)
        if join:
            for thread in self.threads:
                thread.join()

    def fail(self, exc: BaseException) -> None:
        with self.fail_lock:
            if self.failed:
                return
            self.error = exc
            self.failed = True
        # One token wakes whichever node waits on each queue; it then sees `failed`.
        for ready in self.ready:
            ready.put(None)

    # -- the workers' side -------------------------------------------------------------

    def worker(self, node: int) -> None:
        start, n = self.start[node], self.nodes
        while True:
            job = start.get()
            if job is _STOP:
                return
            try:
                self.steps(node, *job)
            except _Aborted:
                pass
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self.fail(exc)
            finally:
                # itertools.count is atomic under the GIL: exactly one node sees n - 1.
                if next(self.finished) % n == n - 1:
                    self.done.put(None)

    def steps(self, node: int, name: str, buffers: list, ufunc, plan: Plan, average: bool) -> None:
        mine = buffers[node]
        steps = plan.node_steps(node)
        pushers = self.pushers[node][name]
        last = len(steps) - 1
        pop = self.pop
        pairwise = self.pairwise
        mine_ready, left_ready = self.ready[node], self.ready[self.left[node]]
        for t, (_, _, _, peer, (a, b), _, _, accumulate, completes) in enumerate(steps):
            pushers[t]()
            try:
                if t and pairwise:
                    left_ready.get()
                if self.failed:
                    raise _Aborted
                if accumulate:
                    dst = mine[a:b]
                    ufunc(dst, buffers[peer][a:b], out=dst)
                    if completes and average:
                        divide_by_nodes(dst, self.nodes)
                else:
                    mine[a:b] = buffers[peer][a:b]
                if t < last:
                    if pairwise:
                        mine_ready.put(None)
                    else:
                        self.barrier(node, t)
            finally:
                pop()

    def barrier(self, node: int, t: int) -> None:
        n = self.nodes
        if next(self.arrivals[t]) % n == n - 1:
            for other in range(n):
                if other != node:
                    self.ready[other].put(None)
        else:
            self.ready[node].get()
            if self.failed:
                raise _Aborted
