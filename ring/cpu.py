"""The threaded NumPy backend: one persistent worker thread per logical node.

All nodes share one address space, so a "link" is a node reading a peer's array at the
range the plan names (:mod:`ring.schedule`; any algorithm, nothing else); reductions are
NumPy ufuncs with ``out=``, which release the GIL on large ranges so nodes really run in
parallel.  Plans that land data in scratch get one scratch array per node.

Synchronisation uses one ``queue.SimpleQueue`` per node as a counting signal: it is
implemented in C, a blocking ``get`` costs one lock round trip like a raw lock (a
``threading.Barrier`` or ``Condition`` costs several), and a count lets a producer run
ahead of its consumer without a separate signal per step, so the state stays linear in N.

* ``sync="pairwise"``: a node waits only for the peers its step ``waits`` for, one queue
  per (peer, node) pair: after step ``t`` node ``j`` puts a token in the queue of every
  node whose step ``t + 1`` waits for it, which takes one before that step.  On the ring
  node ``i`` waits only for its left neighbour, as the original study's GPU code does
  with events; non-neighbours run ahead.  This is enough: node ``i`` at step ``t``
  transitively waits for node ``i + 1`` at step ``t - (N - 1)``, the last step at which
  node ``i + 1`` reads a chunk that node ``i`` overwrites at step ``t``
  (``tests/test_schedule.py`` checks every hazard of every algorithm).  A plan whose
  waits pair more than ``8 N`` nodes (``direct``) runs with the barrier instead.
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
from .schedule import (
    COLLECTIVES,
    Plan,
    check_algorithm,
    check_algorithm_options,
    check_collective,
    plan,
    plan_for,
)

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
_OPTIONS = frozenset({"sync", "algorithm", "segment_bytes", "group_size"})


class _Aborted(Exception):
    """Raised inside a healthy worker when another worker failed."""


_STOP = None  # what a worker's start queue receives instead of a job when it must exit


def check_sync(sync: object) -> str:
    if not isinstance(sync, str) or sync not in SYNC_MODES:
        raise ValueError(f"unknown sync {sync!r}: expected one of {', '.join(SYNC_MODES)}")
    return sync


def _check_options(options: dict, nodes: int, collective: str | None = None) -> tuple:
    """(sync, algorithm, the algorithm's options), or one line saying what is wrong."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError(
            f"unknown option(s) for backend 'cpu': {', '.join(sorted(unknown))} "
            f"(options: {', '.join(sorted(_OPTIONS))})"
        )
    sync = check_sync(options.get("sync", "pairwise"))
    algorithm = check_algorithm(options.get("algorithm", "ring"), collective)
    extra = {k: v for k, v in options.items() if k in ("segment_bytes", "group_size")}
    return sync, algorithm, check_algorithm_options(algorithm, nodes, extra)


def check_call(name: str, buffers: Sequence[np.ndarray], op: str | None, **options) -> Call:
    """Validate a call's options, buffers and op before any thread is woken, so bad input
    leaves every buffer untouched.  Every collective but all_gather reduces, so ``op``
    must name an op (None is not one)."""
    check_collective(name)
    nodes = check_buffer_list(buffers)
    _, algorithm, extra = _check_options(options, nodes, name)
    count, dtype = validate_buffers(buffers)
    ufunc = resolve_op(op, dtype) if name != "all_gather" else None
    average = ufunc is not None and op in AVERAGING
    options = {"algorithm": algorithm, **extra}
    return Call("cpu", name, buffers, op, nodes, options, checked=(ufunc, count, average))


def cache_key(nodes: int, **options) -> tuple:
    """The key under which :func:`ring.get_communicator` caches a CPU communicator: the
    algorithm is per call, so communicators differ only by sync."""
    nodes = check_nodes(nodes)
    return ("cpu", nodes, _check_options(options, nodes)[0])


def make_communicator(nodes: int, **options) -> CpuCommunicator:
    """A new :class:`CpuCommunicator` (the factory :mod:`ring.api` dispatches to)."""
    _check_options(options, check_nodes(nodes))
    return CpuCommunicator(nodes, **options)


# Per-step NVTX ranges are named for communicators up to this size.  A call makes
# 2N(N - 1) step ranges, more than a profile can show beyond this; above it only the call's
# outer range is recorded, and every node shares one table of no-op ranges, so the state
# stays linear in N.
STEP_RANGE_MAX_NODES = 64
# A plan whose waits pair more nodes than this many per node runs with the barrier.
PAIRS_PER_NODE = 8
# Programs kept per communicator (one per plan: collective, algorithm, length, options).
PROGRAMS = 32

Pushers = dict[str, tuple[Callable[[], Any], ...]]


def _no_range() -> None:
    """Push and pop of a step above STEP_RANGE_MAX_NODES: records nothing."""


def _pushers(nodes: int) -> list[Pushers]:
    """Per node and collective, the NVTX range pusher of each of the node's ring steps."""
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


class _Between:
    """``value`` at steps ``start <= t < stop``, nothing elsewhere: one node's queues when
    they are the same at every step (the ring family), in O(1) state."""

    __slots__ = ("start", "stop", "value")

    def __init__(self, value: tuple, start: int, stop: int):
        self.value, self.start, self.stop = value, start, stop

    def __getitem__(self, t: int) -> tuple:
        return self.value if self.start <= t < self.stop else ()


class CpuCommunicator(RingCommunicator):
    """Owns ``nodes`` worker threads and runs collectives on lists of NumPy arrays, by
    ``algorithm`` (see :data:`ring.schedule.ALGORITHMS`; ``segment_bytes`` and
    ``group_size`` are its options) unless a call names another.

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
    ):
        self.nodes = check_nodes(nodes)
        options: dict[str, object] = {"sync": sync, "algorithm": algorithm}
        options |= {"segment_bytes": segment_bytes, "group_size": group_size}
        self.sync, self.algorithm, self.algorithm_options = _check_options(
            {k: v for k, v in options.items() if v is not None}, self.nodes
        )
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

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The worker threads, one per node, for a harness that pins them to cores."""
        return tuple(self._crew.threads)

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
        return (
            f"CpuCommunicator(nodes={self.nodes}, sync={self.sync!r}, "
            f"algorithm={self.algorithm!r}, {state})"
        )

    # -- the caller's side -------------------------------------------------------------

    def _collective(self, name: str, buffers: Sequence[np.ndarray], op: str | None) -> None:
        self._check_open()
        self.execute(
            check_call(name, buffers, op, algorithm=self.algorithm, **self.algorithm_options)
        )

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
        options = dict(call.options)
        algorithm = options.pop("algorithm", self.algorithm)
        buffers = list(call.buffers)
        dtype = buffers[0].dtype
        steps = plan_for(name, self.nodes, count, dtype.itemsize, algorithm, options)
        with self._call_lock:
            self._check_open()
            try:
                with nvtx_ranges.annotate(name):
                    job = (buffers, ufunc, steps, average, *self._crew.prepare(steps, dtype))
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
        # ready[i]: node i's barrier tokens; pairs[(j, i)]: node j's tokens for node i.
        self.ready: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(n)]
        self.pairs: dict[tuple[int, int], queue.SimpleQueue] = {}
        self.arrivals: list[itertools.count] = []
        self.programs: dict[Plan, list] = {}
        self.scratch: list[np.ndarray | None] = [None] * n
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

    # -- the caller's side, before the workers start a call ------------------------------

    def prepare(self, steps: Plan, dtype: np.dtype) -> tuple[list, list]:
        """Each node's scratch (when the plan uses it) and program for ``steps``."""
        scratch: list = [None] * self.nodes
        if steps.uses_scratch:
            for node, array in enumerate(self.scratch):
                if array is None or array.dtype != dtype or array.size < steps.scratch_elements:
                    array = self.scratch[node] = np.empty(steps.scratch_elements, dtype)
                scratch[node] = array
        program = self.programs.get(steps)
        if program is None:
            if len(self.programs) >= PROGRAMS:
                del self.programs[next(iter(self.programs))]
            program = self.programs[steps] = self._program(steps)
        while len(self.arrivals) < steps.steps:
            self.arrivals.append(itertools.count())
        return scratch, program

    def _program(self, steps: Plan) -> list:
        """Per node: its step pushers, and with pairwise sync the queues it takes a token
        from before each step and those it puts one in after (None: use the barrier)."""
        n, last = self.nodes, steps.steps - 1
        if steps.algorithm == "ring":
            pushers = [mine[steps.collective] for mine in self.pushers]
        elif n > STEP_RANGE_MAX_NODES:
            pushers = [(_no_range,) * steps.steps] * n
        else:
            pushers = [
                tuple(nvtx_ranges.pusher(s.name) for s in steps.node_steps(i)) for i in range(n)
            ]
        waits = self._waits(steps)
        if not self.pairwise or waits is None:
            return [(p, None, None) for p in pushers]
        pairs = {
            (j, i)
            for i in range(n)
            for per_step in ((waits[i].value,) if isinstance(waits[i], _Between) else waits[i])
            for j in per_step
        }
        if len(pairs) > PAIRS_PER_NODE * n:
            return [(p, None, None) for p in pushers]
        for pair in pairs:
            self.pairs.setdefault(pair, queue.SimpleQueue())
        gets: list = []
        puts: list = []
        for i in range(n):
            if isinstance(waits[i], _Between):
                w = waits[i].value
                gets.append(_Between(tuple(self.pairs[j, i] for j in w), 1, last + 1))
                takers = tuple(self.pairs[i, k] for k in range(n) if i in waits[k].value)
                puts.append(_Between(takers, 0, last))
            else:
                gets.append([tuple(self.pairs[j, i] for j in w) for w in waits[i]])
                puts.append(
                    [
                        tuple(self.pairs[i, k] for k in range(n) if i in waits[k][t + 1])
                        for t in range(last)
                    ]
                    + [()]
                )
        return list(zip(pushers, gets, puts, strict=True))

    def _waits(self, steps: Plan) -> list | None:
        """Per node, the peers each step waits for; the same at every step but the first
        in the ring family (:class:`_Between`)."""
        n = self.nodes
        if steps.algorithm in ("ring", "ring-segmented", "ring-bidirectional"):
            if steps.steps < 2:
                return [_Between((), 1, 1)] * n
            return [_Between(steps.node_steps(i)[1].waits, 1, steps.steps) for i in range(n)]
        return [[s.waits for s in steps.node_steps(i)] for i in range(n)]

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
        for ready in [*self.ready, *self.pairs.values()]:
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

    def steps(self, node: int, buffers: list, ufunc, plan: Plan, average: bool, scratch, program):
        mine, own = buffers[node], scratch[node]
        steps = plan.node_steps(node)
        pushers, gets, puts = program[node]
        last = len(steps) - 1
        pop = self.pop
        for t, step in enumerate(steps):
            pushers[t]()
            try:
                if gets is not None:
                    for ready in gets[t]:
                        ready.get()
                if self.failed:
                    raise _Aborted
                for peer, (a, b), (
                    c,
                    d,
                ), accumulate, completes, from_scratch, to_scratch in step.moves:
                    src = (own if from_scratch else buffers[peer])[a:b]
                    dst = (own if to_scratch else mine)[c:d]
                    if accumulate:
                        ufunc(dst, src, out=dst)
                        if completes and average:
                            divide_by_nodes(dst, self.nodes)
                    else:
                        dst[...] = src
                if t < last:
                    if puts is None:
                        self.barrier(node, t)
                    else:
                        for ready in puts[t]:
                            ready.put(None)
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
