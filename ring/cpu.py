"""The threaded NumPy backend: one persistent worker thread per logical node.

All nodes share one address space, so a ring "link" is node ``i`` reading node ``i - 1``'s
array at the chunk boundary the schedule names; reductions are NumPy ufuncs with ``out=``,
which release the GIL on large chunks so nodes really run in parallel.

Synchronisation uses raw locks as one-shot signals, because they are the cheapest blocking
primitive CPython has (a ``threading.Barrier`` or ``Condition`` costs several lock round
trips per wait).  Every signal lock starts locked; the producer releases it, the single
consumer acquires it, which also re-arms it for the next call.

* ``sync="pairwise"``: after step ``t`` node ``i`` releases ``signal[i][t]``; before step
  ``t + 1`` node ``i + 1`` acquires it.  Node ``i`` waits only for its left neighbour, as
  the original study's GPU code does with events; non-neighbours run ahead.  This is
  enough: node ``i`` at step ``t`` transitively waits for node ``i + 1`` at step
  ``t - (N - 1)``, the last step at which node ``i + 1`` reads a chunk that node ``i``
  overwrites at step ``t`` (``tests/test_schedule.py`` checks every hazard).
* ``sync="barrier"``: after every step all nodes wait for each other, as the original
  study's CPU code does with ``std::barrier``.  The last node to arrive releases the
  others' ``signal[j][t]``.

Every call ends when the last node to finish releases the caller's ``done`` signal (one
wake-up for the caller instead of one per node), so consecutive calls never overlap.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from . import nvtx_ranges
from .buffers import validate_buffers
from .communicator import CommunicatorClosedError, RingCommunicator
from .ops import resolve_op
from .schedule import ALL_GATHER, REDUCE_SCATTER, chunk_range, ring_schedule

__all__ = ["SYNC_MODES", "CommunicatorClosedError", "CpuCommunicator"]

SYNC_MODES = ("pairwise", "barrier")
MAX_NODES = 1024

# Which schedule phases each collective runs.
COLLECTIVE_PHASES = {
    "allreduce": (REDUCE_SCATTER, ALL_GATHER),
    "reduce_scatter": (REDUCE_SCATTER,),
    "all_gather": (ALL_GATHER,),
}


class _Aborted(Exception):
    """Raised inside a healthy worker when another worker failed."""


def _new_signal() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


@lru_cache(maxsize=1024)
def chunk_bounds(count: int, nodes: int) -> tuple[tuple[int, int], ...]:
    """``chunk_range`` for every chunk, cached because calls repeat the same sizes."""
    return tuple(chunk_range(count, nodes, c) for c in range(nodes))


def prepare_call(buffers: Sequence[np.ndarray], op: str | None):
    """Validate a call's buffers and op; return ``(ufunc or None, count)``.

    Runs before any thread is woken, so bad input leaves every buffer untouched.
    """
    count, dtype = validate_buffers(buffers)
    ufunc = resolve_op(op, dtype) if op is not None else None
    return ufunc, count


def check_sync(sync: str) -> str:
    if sync not in SYNC_MODES:
        raise ValueError(f"unknown sync {sync!r}: expected one of {', '.join(SYNC_MODES)}")
    return sync


def check_nodes(nodes: int) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)):
        raise TypeError(f"nodes must be an integer, got {type(nodes).__name__}")
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes must be in [1, {MAX_NODES}], got {nodes}")
    return int(nodes)


class CpuCommunicator(RingCommunicator):
    """Owns ``nodes`` worker threads and runs ring collectives on lists of NumPy arrays.

    Use it as a context manager, or call :meth:`close`; a closed communicator refuses work.
    If a worker fails mid-collective, every other worker stops at its next wait, the
    threads exit, and the caller receives the original exception.
    """

    backend = "cpu"

    def __init__(self, nodes: int, *, sync: str = "pairwise"):
        self.nodes = check_nodes(nodes)
        self.sync = check_sync(sync)
        self._closed = False
        self._call_lock = threading.Lock()
        self._fail_lock = threading.Lock()
        self._error: BaseException | None = None
        self._failed = False
        self._stopping = False
        self._job = None

        n = self.nodes
        schedule = self._schedule = ring_schedule(n)
        steps = 2 * (n - 1)
        self._signal = [[_new_signal() for _ in range(steps)] for _ in range(n)]
        self._arrivals = [itertools.count() for _ in range(steps)]
        # Per node and collective: (chunk, accumulate, push-range) for each step, in order.
        self._plans = [
            {
                name: tuple(
                    (t.chunk, t.accumulate, nvtx_ranges.pusher(t.name))
                    for t in schedule.for_node(node, phases)
                )
                for name, phases in COLLECTIVE_PHASES.items()
            }
            for node in range(n)
        ]
        self._start = [_new_signal() for _ in range(n)]
        self._done = _new_signal()
        self._finished = itertools.count()
        self._threads: list[threading.Thread] = []
        if n > 1:
            for node in range(n):
                thread = threading.Thread(
                    target=self._worker, args=(node,), name=f"ring-cpu-node{node}", daemon=True
                )
                thread.start()
                self._threads.append(thread)

    def close(self) -> None:
        """Stop and join the worker threads.  Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        with self._call_lock:
            self._stopping = True
            for start in self._start:
                start.release()
            for thread in self._threads:
                thread.join(timeout=5)
            self._threads = []

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"CpuCommunicator(nodes={self.nodes}, sync={self.sync!r}, {state})"

    # -- the caller's side -------------------------------------------------------------

    def _collective(self, name: str, buffers: Sequence[np.ndarray], op: str | None) -> None:
        self._check_open()
        ufunc, count = prepare_call(buffers, op)
        if len(buffers) != self.nodes:
            raise ValueError(
                f"this communicator has {self.nodes} nodes but {len(buffers)} buffers were given"
            )
        self._execute(name, buffers, ufunc, count)

    def _check_open(self) -> None:
        if self._closed:
            raise CommunicatorClosedError(f"{self!r} is closed: create a new communicator")

    def _execute(self, name: str, buffers: Sequence[np.ndarray], ufunc, count: int) -> None:
        """Run a collective on buffers that :func:`prepare_call` accepted."""
        if self.nodes == 1 or count == 0:
            return
        bounds = chunk_bounds(count, self.nodes)
        with self._call_lock, nvtx_ranges.annotate(name):
            self._check_open()
            self._job = (name, list(buffers), ufunc, bounds)
            for start in self._start:
                start.release()
            self._done.acquire()
            self._job = None
        if self._error is not None:
            error = self._error
            self.close()
            raise error

    # -- the workers' side -------------------------------------------------------------

    def _worker(self, node: int) -> None:
        start, n = self._start[node], self.nodes
        while True:
            start.acquire()
            if self._stopping:
                return
            try:
                self._run(node, *self._job)
            except _Aborted:
                pass
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self._fail(exc)
            finally:
                # itertools.count is atomic under the GIL: exactly one node sees n - 1.
                if next(self._finished) % n == n - 1:
                    self._done.release()

    def _run(self, node: int, name: str, buffers: list, ufunc, bounds) -> None:
        schedule = self._schedule
        mine, left = buffers[node], buffers[schedule.left(node)]
        plan = self._plans[node][name]
        last = len(plan) - 1
        pop = nvtx_ranges.pop
        pairwise = self.sync == "pairwise"
        my_signals = self._signal[node]
        left_signals = self._signal[schedule.left(node)]
        for t, (chunk, accumulate, push) in enumerate(plan):
            push()
            try:
                if t and pairwise:
                    left_signals[t - 1].acquire()
                    if self._failed:
                        raise _Aborted
                a, b = bounds[chunk]
                if accumulate:
                    dst = mine[a:b]
                    ufunc(dst, left[a:b], out=dst)
                else:
                    mine[a:b] = left[a:b]
                if t < last:
                    if pairwise:
                        my_signals[t].release()
                    else:
                        self._barrier(node, t)
            finally:
                pop()

    def _barrier(self, node: int, t: int) -> None:
        n = self.nodes
        if next(self._arrivals[t]) % n == n - 1:
            for other in range(n):
                if other != node:
                    self._signal[other][t].release()
        else:
            self._signal[node][t].acquire()
            if self._failed:
                raise _Aborted

    def _fail(self, exc: BaseException) -> None:
        with self._fail_lock:
            if self._failed:
                return
            self._error = exc
            self._failed = True
        # Wake every node that waits (or will wait) on a signal; they see _failed and stop.
        for row in self._signal:
            for signal in row:
                with contextlib.suppress(RuntimeError):  # already released
                    signal.release()
