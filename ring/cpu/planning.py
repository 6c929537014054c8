"""How a cpu call of ``algorithm="auto"`` is planned by measuring (:mod:`ring.planning`).

A candidate is (algorithm, executor, inline, tile): the table's candidates for the call's N
and size (:func:`ring.planning.candidates.table_candidates`), each by nodes and by position,
on the calling thread and on the workers, with the default tile; an executor or an
``inline_bytes`` the caller gave is kept, not planned over. A candidate whose plan makes the
moves of one before it the same way is dropped (at N = 2, direct and hierarchical are the
ring): as the trial starts where the plans' units show it, else when its turn comes. The
first candidate is what ``planning="estimate"`` runs (the table's pick on the default
executor and threshold), so a trial cut short by its budget still ends with a plan at least
as fast as that. On the calling thread, where each buffer fits one tile, a candidate by
nodes is left to its twin by position when that makes no more operations: the same work with
less around it, and a first call that costs a fraction as much to make.

What planning measures would otherwise be machine constants: the executor, where a call
stops paying for waking the workers (``INLINE_BYTES`` is only the estimate's threshold), and
the tile by slices (:meth:`Planner.refinement`; the cache probe's is only the start). An
allreduce so large that slices of it stream from memory as the whole call does
(:func:`ring.planning.race.slices_apart`) is cut, in a trial call, into one slice per
candidate, each timed apart: at 1 GiB, where a call can take a third of the budget, every
candidate is timed in each call instead of one. Calls above :data:`INLINE_CAP` are not tried
on the calling thread alone, and the candidates on the workers only after those inline,
where the workers' measured round trip does not already lose to one of them: at a few KiB,
waking threads costs more than the whole call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache

from .. import auto
from ..host import positions
from ..host.moves import bindable
from ..planning import race, store
from ..planning.candidates import table_candidates
from ..schedule import Plan

__all__ = ["FUSED", "INLINE_CAP", "Planner"]

# Above this, one thread streaming every node's buffers is not tried against the workers.
INLINE_CAP = 64 << 20

# By position, reduce-broadcast is the fused reduce-then-copy: tile by tile, node 0's tile
# takes every other node's and is copied back while all are in cache, so each byte crosses
# memory twice (2N·S), the least any allreduce can.  The table prices algorithms by nodes,
# where it is the slowest, so it would not rank it among the large calls' candidates.
FUSED = "reduce-broadcast"

Choice = tuple  # (algorithm, executor, inline, tile bytes by slices or None: the default)
# A winner by slices is tried again with tiles this many times larger and smaller.
TILE_STEP = 4
MIN_TILE = 4 << 10


class Planner:
    """The plans of one communicator's call shapes, and the trials still under way."""

    def __init__(self, nodes: int, sync: str, inline_bytes: int, wake: Callable[[], float]):
        self.nodes, self.sync, self.inline_bytes = nodes, sync, inline_bytes
        # Seconds of the workers' round trip with next to no work: no candidate on the
        # workers is faster, so one is not tried where a candidate inline beats it.
        self._wake = wake
        self._plans: dict[str, Choice] = {}
        self._trials: dict[str, race.Trial] = {}
        self._generation = (auto.generation(), store.generation())
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        """In the child of a ``fork()``: a new lock (another thread may have held this one)."""
        self._lock = threading.Lock()

    def current(self) -> bool:
        """Whether the plans and trials kept are of today's tables and wisdom."""
        return self._generation == (auto.generation(), store.generation())

    def candidates(
        self, name: str, nbytes: int, inline_given: int | None, executor_given: str | None
    ) -> list[Choice]:
        """The candidates of a call, the estimate's first; an allreduce on the workers tries
        :data:`FUSED` by slices second, whatever the table's rank of it (where a call is a
        large share of the budget, only the first few candidates run)."""
        if inline_given is not None:
            runs = [nbytes <= inline_given]
        else:
            runs = [nbytes <= self.inline_bytes, nbytes > self.inline_bytes]
            runs = [r for r in runs if not r or nbytes <= INLINE_CAP]
        executors = [executor_given] if executor_given else ["nodes", "slices"]
        ranked = {
            inline: table_candidates("cpu", name, self.nodes, nbytes, nbytes if inline else 0)
            for inline in runs
        }
        found: list[Choice] = []
        for rank in range(max(map(len, ranked.values()))):
            for inline in runs:
                if rank < len(ranked[inline]):
                    found += [(ranked[inline][rank], e, inline, None) for e in executors]
        if name == "allreduce" and "slices" in executors and False in runs:
            found.insert(1, (FUSED, "slices", False, None))  # second: see FUSED
        return list(dict.fromkeys(found))

    @staticmethod
    def refinement(trial: race.Trial, nbytes: int) -> race.Trial | None:
        """Where a trial's winner runs by slices, the trial that times it against tiles
        :data:`TILE_STEP` times larger and smaller (those that cut the call into another
        number of tiles), in what is left of the budget, the winner's times kept: the tile
        is measured too, the cache probe's size only the start.  None where there is
        nothing to try."""
        best = trial.winner()
        left = trial.budget - trial.spent
        if best[1] != "slices" or trial.refining or left <= 0:
            return None
        tile = best[3] or positions.tile_bytes()
        tiles = -(-nbytes // tile)
        others = [
            t
            for t in (tile * TILE_STEP, tile // TILE_STEP)
            if t >= MIN_TILE and -(-nbytes // t) != tiles
        ]
        if not others:
            return None
        return race.Trial(
            [best, *((*best[:3], t) for t in others)],
            left,
            times={c: list(t) for c, t in trial.times.items()},
            warmed=set(trial.warmed),
            firsts=dict(trial.firsts),
            refining=True,
            pieces=trial.pieces,
            screened=set(trial.screened) | {best},
        )

    def planned(
        self, name: str, dtype: str, op: str | None, nbytes: int, inline_given, executor_given
    ) -> Choice | None:
        """The plan a call shape settled on (None while it is still being measured)."""
        fixed = (inline_given, executor_given, self.sync)
        key = race.shape_key("cpu", name, self.nodes, dtype, op, nbytes, fixed)
        return self._plans.get(key) or store.wisdom().get(key)

    def plan(
        self,
        name: str,
        dtype: str,
        op: str | None,
        nbytes: int,
        inline_given: int | None,
        executor_given: str | None,
        steps_of: Callable[[str], Plan],
    ) -> tuple[Choice, race.Trial | None]:
        """The choice a call runs, and the trial to record its time in (None once the
        shape's plan is made); ``steps_of(algorithm)``: the call's plan by it."""
        fixed = (inline_given, executor_given, self.sync)
        key = race.shape_key("cpu", name, self.nodes, dtype, op, nbytes, fixed)
        if not self.current():  # other tables or wisdom: measure again
            self._plans, self._trials = {}, {}
            self._generation = (auto.generation(), store.generation())
        choice = self._plans.get(key)
        if choice is not None:
            return choice, None
        with self._lock:
            known = store.wisdom().get(key)
            if known is not None:
                self._plans[key] = known
                return known, None
            trial = self._trials.get(key)
            if trial is None:
                found = self.candidates(name, nbytes, inline_given, executor_given)
                floors = {c: self._wake() for c in found if not c[2]}
                found, screened = _screened(found, floors, steps_of, nbytes)
                # An allreduce is element-wise: its slices can run apart.
                apart = race.slices_apart(self.nodes, nbytes) if name == "allreduce" else 1
                trial = race.Trial(
                    found,
                    race.budget_seconds(),
                    floors,
                    pieces=min(len(found), apart),
                    screened=screened,
                )
                self._trials[key] = trial
            group = _distinct(trial, steps_of, nbytes)
            candidate = group[0] if group else None
            if candidate is None and (refined := self.refinement(trial, nbytes)) is not None:
                trial = self._trials[key] = refined
                candidate = trial.next()
            if candidate is not None:
                return candidate, trial
            del self._trials[key]
            store.wisdom().put(key, trial, "cpu", name)
            choice = self._plans[key] = trial.winner()
            return choice, None


def _screened(
    found: list[Choice], floors: dict, steps_of: Callable[[str], Plan], nbytes: int
) -> tuple[list[Choice], set]:
    """``found`` less those of its candidates without a floor (the ones that run first)
    that would cost what another does, as their plans' units
    (:attr:`~ring.schedule.Plan.unit`) show, with the set of candidates compared so.
    Dropped: one whose unit makes the moves of an earlier one's on the same executor (at
    N = 2, direct's and hierarchical's are the ring's), and one on the calling thread by
    nodes that its twin by position cannot lose to (:func:`_by_position_suffices`).  Units
    are built once per collective, N and algorithm, so this costs one plan per algorithm
    once per trial, not a pass per call; candidates with a floor, which may never run, and
    plans without a unit are compared as they first run (:func:`_distinct`)."""
    plans: dict[str, Plan] = {}  # per algorithm, built once
    kept: list[Choice] = []
    screened: set = set()
    for candidate in found:
        if candidate in floors:
            kept.append(candidate)
            continue
        algorithm = candidate[0]
        if algorithm not in plans:
            plans[algorithm] = steps_of(algorithm)
        steps = plans[algorithm]
        if steps.unit is None:
            kept.append(candidate)
        elif not any(c[1:] == candidate[1:] and plans[c[0]].key == steps.key for c in screened):
            kept.append(candidate)
            screened.add(candidate)
    for candidate in [c for c in kept if c in screened]:
        if _by_position_suffices(kept, candidate, plans[candidate[0]], nbytes):
            kept.remove(candidate)
    return kept, screened


def _distinct(trial: race.Trial, steps_of: Callable[[str], Plan], nbytes: int) -> list[Choice]:
    """The candidates of the trial's next call (:meth:`~ring.race.Trial.share`), those
    dropped on the way that :func:`_screened` could not compare: one whose plan makes the
    moves of one already run, or of one before it in the call, the same way (they would
    cost the same), or, on the calling thread by nodes, whose twin by position it cannot
    beat (:func:`_by_position_suffices`).  Compared only where a candidate is first run,
    which builds its plan anyway, and only plans short enough to bind (a plan's moves can
    be many)."""
    while True:
        group = trial.share()
        for k, candidate in enumerate(group):
            if candidate in trial.warmed or candidate in trial.screened:
                continue
            steps = steps_of(candidate[0])
            if not bindable(steps):
                continue
            others = [*trial.warmed, *group[:k]]
            same = any(c[1:] == candidate[1:] and steps_of(c[0]).key == steps.key for c in others)
            if same or _by_position_suffices(trial.candidates, candidate, steps, nbytes):
                trial.drop(candidate)
                break
        else:
            return group


def _by_position_suffices(candidates: list, candidate: Choice, steps: Plan, nbytes: int) -> bool:
    """Whether ``candidate``, a call on the calling thread by nodes, is left to its twin by
    position (one of ``candidates``): where each buffer fits one tile, by position runs
    each of its operations once over the whole range, as by nodes runs each move, with no
    push and pop of a step range between them; so where it makes no more operations than the plan
    has moves, it does the same work with less around it.  Building the by-nodes program
    costs several times the by-position one, and at a few KiB a candidate's first call is
    most of what planning costs."""
    algorithm, executor, inline, tile = candidate
    twin = (algorithm, "slices", inline, tile)
    if executor != "nodes" or not inline or twin not in candidates:
        return False
    if nbytes > positions.tile_bytes():  # by nodes tiles its moves by the same default
        return False
    return _fewer_operations(steps.unit or steps)  # a unit's are as many as its plans'


@lru_cache(maxsize=64)
def _fewer_operations(steps: Plan) -> bool:
    """Whether by position ``steps`` makes no more operations than it has moves that
    touch an element."""
    placed = positions.by_position(steps)
    if placed is None:
        return False
    operations = sum(len(segment.ops) for segment in placed.segments)
    made = sum(m.dst[1] > m.dst[0] for node in steps.moves for step in node for m in step)
    return operations <= made
