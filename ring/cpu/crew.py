"""The CPU backend's worker threads, one per logical node: how they wait for each other and
how a node runs its steps (what a step does to the arrays is :mod:`ring.host.moves`'s).

Synchronisation uses one ``queue.SimpleQueue`` per node as a counting signal: it is
implemented in C, a blocking ``get`` costs one lock round trip like a raw lock (a
``threading.Barrier`` or ``Condition`` costs several), and a count lets a producer run
ahead of its consumer without a separate signal per step, so the state stays linear in N.

* ``sync="pairwise"``: a node waits only for the peers its step ``waits`` for, one queue
  per (peer, node) pair: after step ``t`` node ``j`` puts a token in the queue of every
  node whose step ``t + 1`` waits for it, which takes one before that step.  On the ring
  node ``i`` waits only for its left neighbour (as the original study's GPU code does with
  events), which is enough: node ``i`` at step ``t`` transitively waits for node ``i + 1``
  at step ``t - (N - 1)``, the last step at which node ``i + 1`` reads a chunk that node
  ``i`` overwrites at step ``t`` (``tests/test_schedule.py`` checks every hazard of every
  algorithm); a ring-segmented block's first step waits for no one.  A plan whose waits
  pair more than ``8 N`` nodes (``direct``) runs with the barrier instead.
* ``sync="barrier"``: after every step all nodes wait for each other, as the original
  study's CPU code does with ``std::barrier``.  The last node to arrive puts a token in
  every other node's ``ready`` queue.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from .. import nvtx
from ..host.moves import (
    Bound,
    bind,
    bind_run,
    bind_steps,
    bindable,
    inline_steps,
    run_moves,
    run_ranged,
    tiled_moves,
)
from ..host.positions import (
    SliceJob,
    by_position,
    run_slice,
    scratch_slots,
    slice_bounds,
    tile_elements,
)
from ..nvtx import STEP_RANGE_MAX_NODES, Pushers, no_range, node_pushers
from ..schedule import RING_FAMILY, Plan

__all__ = ["PAIRS_PER_NODE", "PROGRAMS", "Aborted", "Between", "Crew", "Program", "program"]

PAIRS_PER_NODE = 8  # a plan whose waits pair more nodes per node runs with the barrier


def _elements(tile: int | None, dtype: np.dtype) -> int:
    """Elements of a tile of ``tile`` bytes (None: the machine's default tile)."""
    return tile_elements(dtype) if tile is None else max(1, tile // dtype.itemsize)


class Between:
    """``value`` at every step ``t`` but those where ``(t + shift) % period == 0``, nothing
    there: one node's queues when they are the same at every step but a block's first (the
    ring family, whose blocks are independent ring passes of ``period`` steps), in O(1)
    state.  A node takes tokens before every step but a block's first (shift 0) and puts
    them after every step but a block's last (shift 1)."""

    __slots__ = ("period", "shift", "value")

    def __init__(self, value: tuple, period: int, shift: int):
        self.value, self.period, self.shift = value, period, shift

    def __getitem__(self, t: int) -> tuple:
        return self.value if (t + self.shift) % self.period else ()


class Program(NamedTuple):
    """One node's part of a plan: its step pushers, and with pairwise sync the queues it
    takes a token from before each step and those it puts one in after (None: use the
    barrier)."""

    pushers: tuple
    gets: Any
    puts: Any


def program(steps: Plan, pushers: list[Pushers], pairwise: bool, pairs: dict) -> list[Program]:
    """Every node's :class:`Program` for ``steps``; the queues of new (peer, node) pairs
    are added to ``pairs``, which the communicator keeps for every later plan."""
    n = steps.nodes
    if steps.algorithm == "ring":
        mine = [p[steps.collective] for p in pushers]
    elif n > STEP_RANGE_MAX_NODES:
        mine = [(no_range,) * steps.steps] * n
    else:
        mine = [tuple(nvtx.pusher(s.name) for s in steps.node_steps(i)) for i in range(n)]
    waits = _waits(steps)
    used = {
        (j, i)
        for i in range(n)
        for per_step in ((waits[i].value,) if isinstance(waits[i], Between) else waits[i])
        for j in per_step
    }
    if not pairwise or len(used) > PAIRS_PER_NODE * n:
        return [Program(p, None, None) for p in mine]
    for pair in used:
        pairs.setdefault(pair, queue.SimpleQueue())
    gets, puts = _queues(waits, steps.steps - 1, pairs)
    return [Program(*node) for node in zip(mine, gets, puts, strict=True)]


def _queues(waits: list, last: int, pairs: dict) -> tuple[list, list]:
    """Per node, the queues its steps take tokens from and put them in."""
    n = len(waits)
    gets: list = []
    puts: list = []
    for i in range(n):
        if isinstance(waits[i], Between):
            w = waits[i].value
            period = waits[i].period
            gets.append(Between(tuple(pairs[j, i] for j in w), period, 0))
            takers = tuple(pairs[i, k] for k in range(n) if i in waits[k].value)
            puts.append(Between(takers, period, 1))
        else:
            gets.append([tuple(pairs[j, i] for j in w) for w in waits[i]])
            puts.append(
                [tuple(pairs[i, k] for k in range(n) if i in waits[k][t + 1]) for t in range(last)]
                + [()]
            )
    return gets, puts


def _waits(steps: Plan) -> list:
    """Per node, the peers each step waits for; in the ring family the same at every
    step but the first of each block (:class:`Between`)."""
    n = steps.nodes
    if steps.algorithm in RING_FAMILY:
        period = steps.steps // steps.blocks
        if period < 2:
            return [Between((), 1, 0)] * n
        return [Between(steps.node_steps(i)[1].waits, period, 0) for i in range(n)]
    return [[s.waits for s in steps.node_steps(i)] for i in range(n)]


# Programs kept per communicator (one per plan: collective, algorithm, length, options).
PROGRAMS = 32
_STOP = None  # what a worker's start queue receives instead of a job when it must exit


class Aborted(Exception):
    """Raised inside a healthy worker when another worker failed."""


class _Job(NamedTuple):
    buffers: list
    ufunc: Any
    plan: Plan
    average: bool
    scratch: list
    program: list
    actions: list  # per node: the steps' moves (tiled), or None to run step.moves
    tile: int  # elements per tile
    finished: Any  # itertools.count: workers done with this call
    workers: int  # every node's worker runs its steps


def _again(run, job):
    """``run(job)`` as a new call: a fresh count of the workers done with it."""
    return run(job._replace(finished=itertools.count()))


class Crew:
    """The worker threads and all they share.  It holds no reference to its communicator."""

    def __init__(self, nodes: int, sync: str, started: bool = True):
        n = self.nodes = nodes
        self.pairwise = sync == "pairwise"
        self.pushers = node_pushers(n) if n > 1 else []
        self.pop = nvtx.pop if n <= STEP_RANGE_MAX_NODES else no_range
        # ready[i]: node i's barrier tokens; pairs[(j, i)]: node j's tokens for node i.
        self.ready: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(n)]
        self.pairs: dict[tuple[int, int], queue.SimpleQueue] = {}
        self.arrivals: list[itertools.count] = []
        self.programs: dict[Plan, tuple[list[Program], list]] = {}
        self.scratch: list[np.ndarray | None] = [None] * n
        self.sliced: dict[tuple, tuple] = {}  # (plan, parts, dtype): Crew._slice_shape
        self.slots: list = []  # executor="slices": per part, each node's scratch tile
        self.slots_key: tuple | None = None
        self.start: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(n)]
        self.done: queue.SimpleQueue = queue.SimpleQueue()
        self.fail_lock = threading.Lock()
        self.error: BaseException | None = None
        self.failed = False
        self.jobs = 0  # calls handed to the workers (a call run inline wakes none)
        self.threads: list[threading.Thread] = []
        self.started = False
        if started:
            self.start_threads()

    def start_threads(self) -> None:
        """Start the worker threads, one per node (none for one node): when the crew is
        made, or, for a crew made without them (a fork's child's, which may never need
        them), before its first call on the workers."""
        self.started = True
        for node in range(self.nodes if self.nodes > 1 else 0):
            thread = threading.Thread(
                target=self.worker, args=(node,), name=f"ring-cpu-node{node}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def forget_scratch(self) -> None:
        """Drop the scratch arrays kept between calls (sized to the last calls' buffers);
        the next call that needs some makes it again."""
        self.scratch = [None] * self.nodes
        self.slots, self.slots_key = [], None

    # -- the caller's side, before the workers start a call ------------------------------

    def job(self, buffers: list, ufunc, steps: Plan, average: bool) -> _Job:
        """Everything the workers need for one call of ``steps`` on ``buffers``: each
        node's scratch (when the plan uses it), program and tiled moves."""
        dtype = buffers[0].dtype
        scratch: list = [None] * self.nodes
        if steps.uses_scratch:
            for node, array in enumerate(self.scratch):
                if array is None or array.dtype != dtype or array.size < steps.scratch_elements:
                    array = self.scratch[node] = np.empty(steps.scratch_elements, dtype)
                scratch[node] = array
        compiled = self.programs.get(steps)
        if compiled is None:
            if len(self.programs) >= PROGRAMS:
                del self.programs[next(iter(self.programs))]
            compiled = self.programs[steps] = self._compile(steps)
        while len(self.arrivals) < steps.steps:
            self.arrivals.append(itertools.count())
        tile = tile_elements(dtype)
        return _Job(
            buffers, ufunc, steps, average, scratch, *compiled, tile, itertools.count(), self.nodes
        )

    def slice_job(
        self, buffers: list, ufunc, steps: Plan, average: bool, parts: int, tile: int | None = None
    ):
        """One call of ``steps`` run by position (:mod:`ring.host.positions`) in ``parts``
        slices of ``tile`` bytes (None: :func:`~ring.host.positions.tile_bytes`), or None
        where the plan cannot be read by position."""
        dtype = buffers[0].dtype
        key = (steps, parts, dtype, tile)
        shape = self.sliced.get(key)
        if shape is None:
            if len(self.sliced) >= PROGRAMS:
                del self.sliced[next(iter(self.sliced))]
            shape = self.sliced[key] = self._slice_shape(steps, parts, dtype, tile)
        positions, bounds, tile = shape
        if positions is None:
            return None
        scratch: list = []
        if positions.uses_scratch:
            if self.slots_key != (dtype, tile, parts):
                self.slots = scratch_slots(parts, self.nodes, tile, dtype)
                self.slots_key = (dtype, tile, parts)
            scratch = self.slots
        return SliceJob(
            buffers, ufunc, average, positions, bounds, tile, scratch, itertools.count(), parts - 1
        )

    def bind(
        self,
        op,
        buffers: list,
        ufunc,
        steps: Plan,
        average: bool,
        executor: str,
        tile: int | None = None,
    ) -> Bound | None:
        """A call of ``steps`` on the calling thread bound to ``buffers``
        (:mod:`ring.host.moves`), by position or node after node as ``executor`` says;
        None where a plan cannot be read by position or has more than BOUND_MOVES moves."""
        if not bindable(steps):
            return None
        if executor == "nodes":
            job = self.job(buffers, ufunc, steps, average)
            return bind_steps(op, buffers, ufunc, job, self.pop)
        positions = by_position(steps)
        if positions is None:
            return None
        elements = _elements(tile, buffers[0].dtype)
        return bind(op, steps.algorithm, buffers, ufunc, average, positions, elements)

    def bind_workers(
        self,
        op,
        buffers: list,
        ufunc,
        steps: Plan,
        average: bool,
        threads: int,
        executor: str,
        tile: int | None = None,
    ) -> Bound:
        """A call on the workers bound to ``buffers``: its job is made once, and each
        repeat runs it with a new count of finished workers (its one per-call state)."""
        job: Any = None
        if executor == "slices":
            job = self.slice_job(buffers, ufunc, steps, average, threads, tile)
        if job is not None:
            run = partial(_again, self.run_slices, job)
        else:
            run = partial(_again, self.run, self.job(buffers, ufunc, steps, average))
        return bind_run(op, steps.algorithm, buffers, ufunc, run)

    @staticmethod
    def _slice_shape(steps: Plan, parts: int, dtype: np.dtype, tile: int | None) -> tuple:
        """What a sliced call of ``steps`` needs besides its buffers: the plan by position,
        each part's positions and the tile, in elements."""
        elements = _elements(tile, dtype)
        return by_position(steps), slice_bounds(steps.length, parts, elements), elements

    def _compile(self, steps: Plan) -> tuple[list[Program], list]:
        programs = program(steps, self.pushers, self.pairwise, self.pairs)
        if steps.algorithm in RING_FAMILY:  # one move per lane and step: nothing to tile
            return programs, [None] * self.nodes
        actions = [[tiled_moves(s) for s in steps.node_steps(i)] for i in range(self.nodes)]
        return programs, actions

    def run(self, job: _Job) -> BaseException | None:
        """Run one collective on every node; return a worker's exception, if any.

        If the caller is interrupted while the nodes run, every waiting node is woken to
        stop; the caller then stops and joins them (:meth:`stop`) before the interruption
        propagates, so no node touches a buffer afterwards.
        """
        if not self.started:
            self.start_threads()
        self.jobs += 1
        try:
            for start in self.start:
                start.put(job)
            self.done.get()
        except BaseException as interruption:
            self.fail(interruption)
            raise
        return self.error if self.failed else None

    def run_inline(self, job: _Job) -> None:
        """Run one collective on the calling thread: every node's step ``t``, node after
        node, before any node's step ``t + 1``, which is the order ``sync="barrier"``
        imposes.  Within a step no node reads a range that another node writes at that
        step (:mod:`ring.schedule.steps`; ``tests/test_schedule.py`` checks every
        algorithm), so the order of nodes within a step cannot change a result, and each
        element sees the threaded path's operations in its order: bit for bit its result.
        No worker is woken; an exception (Ctrl-C too) propagates to the caller as is."""
        run_ranged(inline_steps(job), job.ufunc, len(job.buffers), self.pop)

    def run_slices(self, job: SliceJob) -> BaseException | None:
        """Run one collective by position: slice 0 on the calling thread, the others on
        workers 0.. (whichever node they serve); return a worker's exception, if any.  An
        exception on the calling thread (Ctrl-C too) stops the workers at their next tile
        and propagates; the caller then stops and joins them (:meth:`stop`)."""
        if job.workers:
            if not self.started:
                self.start_threads()
            self.jobs += 1
            for start in self.start[: job.workers]:
                start.put(job)
        try:
            with contextlib.suppress(Aborted):  # a worker failed: its error is returned
                run_slice(job, 0, self.check_failed)
            if job.workers:
                self.done.get()
        except BaseException as interruption:
            self.fail(interruption)
            raise
        return self.error if self.failed else None

    def check_failed(self) -> None:
        """Raise :class:`Aborted` if a thread of this call failed or the call was stopped."""
        if self.failed:
            raise Aborted

    def stop(self, join: bool) -> None:
        """Make every worker exit after its current step; with ``join``, wait for them."""
        self.fail(Aborted("stopped"))
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
        start = self.start[node]
        while True:
            job = start.get()
            if job is _STOP:
                return
            try:
                if job.__class__ is SliceJob:
                    run_slice(job, node + 1, self.check_failed)
                else:
                    self.steps(node, job)
            except Aborted:
                pass
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self.fail(exc)
            finally:
                # itertools.count is atomic under the GIL: exactly one worker sees the last.
                if next(job.finished) == job.workers - 1:
                    self.done.put(None)
            job = None  # held until the next call, it would keep the caller's buffers alive

    def steps(self, node: int, job: _Job) -> None:
        steps = job.plan.node_steps(node)
        pushers, gets, puts = job.program[node]
        actions = job.actions[node]
        last = len(steps) - 1
        pop = self.pop
        for t, step in enumerate(steps):
            pushers[t]()
            try:
                if gets is not None:
                    for ready in gets[t]:
                        ready.get()
                if self.failed:
                    raise Aborted
                run_moves(job, node, step.moves if actions is None else actions[t])
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
                raise Aborted
