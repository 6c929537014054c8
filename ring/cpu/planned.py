"""How a cpu call is planned: its plan by the options given, or by ``auto``'s measuring
(:class:`~ring.cpu.planning.Planner`, :mod:`ring.planning`), and the calls of a trial under
way, each run by one candidate and timed for it.

A trial's call that repeats on the same buffers runs its candidate bound, as its plan will
once chosen, so what is timed is what the plan costs; a call large enough that slices of it
stream from memory as the whole does runs one candidate per slice
(:meth:`~ring.planning.race.Trial.share`).  :class:`PlannedCalls` is the part of
:class:`~ring.cpu.communicator.CpuCommunicator` that does this.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..communicator import Call
from ..host.moves import Bound
from ..planning.candidates import auto_generation, resolve_algorithm
from ..planning.race import Trial
from ..schedule import AUTO, Plan, plan_for
from ..schedule.steps import chunk_range
from .checks import algorithm_options
from .execution import Execution
from .planning import Planner

__all__ = ["PlannedCalls"]


class PlannedCalls(Execution):
    """The planning of a checked call, and the trial calls of ``auto`` (a mixin of
    :class:`~ring.cpu.communicator.CpuCommunicator`, whose state these are)."""

    backend: str
    planning: str
    _fixed: dict[str, object]
    _planner: Planner
    _wake: float | None
    _trying: dict[object, Trial]

    if TYPE_CHECKING:

        def _execute(self, call: Call, key: object = None) -> None: ...

    def _trial_call(self, call: Call, key: object, trying: tuple, *planned) -> None:
        """A call that ``auto``'s trial runs for the candidate of ``trying`` (trial,
        candidate), planned as ``planned`` (steps, threads, executor, tile): the one
        candidate (:meth:`_try`), or one per slice where the trial shares the call out."""
        trial = trying[0]
        if 1 < len(share := trial.share()) <= call.checked[1]:
            self._try_share(call, key, trial, share)
        else:
            self._try(call, key, trying, *planned)

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
                self._execute(call, key)
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
        given, options = call.options, algorithm_options(call)
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
        options = algorithm_options(call)
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
