"""The timed trial race of ``algorithm="auto"``: the first calls of a call shape try the
candidates, and the fastest becomes the shape's plan.

What FFTW's planner (``FFTW_MEASURE``) and cuDNN's benchmark mode do, for collectives: a new
*call shape* (backend, collective, N, dtype, op, the next power of two of the bytes per
node, and the options the caller fixed) runs its first calls by the candidates
(:mod:`ring.planning.candidates`), each timed on the caller's own call, so trying costs no
extra work and every call's result is right whichever candidate ran it.  The candidates
take turns: each's first call makes and binds its plan and is not timed, then up to
``REPEATS`` timed calls each (the least counts, :meth:`Trial.scores`); one whose least is
more than ``DROP`` times the best so far is not tried again, nor one whose measured floor
(a planner's: the cpu's round trip of its worker threads) is above the best.  Once every
candidate is timed, or the next call would end past the shape's budget
(``RING_PLAN_BUDGET`` seconds, default 1; the call's time guessed as its candidate's so
far, else the fastest's; two candidates run whatever it costs), the fastest candidate is
the shape's plan: by its least timed call, or by its first call's run where the budget
ended before timing it.  Candidates within ``NOISE`` of the fastest are a tie
(:meth:`Trial.tied`): the plan is the first of them in the candidates' order (the table's
estimate first), and the wisdom says they tied, so a tie never decides at random.  Where a
planner lets a call run several candidates (:attr:`Trial.pieces`: the cpu's and mpi's cut a
large allreduce into slices, each by another candidate, :func:`slices_apart`), each call
times each of them once.

This module is the one race every backend runs; a backend supplies how one candidate's
call is timed (the cpu's and gpu's communicators, and under MPI every rank agreeing on the
slowest rank's time, :mod:`ring.mpi.planning`).
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from ..machine import cache_bytes

__all__ = [
    "BUDGET_ENV",
    "DROP",
    "NOISE",
    "PLANNING",
    "REPEATS",
    "PlanningCost",
    "Trial",
    "budget_seconds",
    "check_planning",
    "forget_cost",
    "planning_cost",
    "shape_key",
    "slices_apart",
    "spend",
]

BUDGET_ENV = "RING_PLAN_BUDGET"
REPEATS = 3
DROP = 2.0
# Candidates whose least times are within this factor of the fastest's tie: the timings of
# one process cannot rank them, so the earlier in the candidates' order is the plan.
NOISE = 1.05
# "measure": plan by measuring (this module); "estimate": the decision table's pick only.
PLANNING = ("measure", "estimate")


def check_planning(planning: object) -> str:
    if not isinstance(planning, str) or planning not in PLANNING:
        raise ValueError(f"unknown planning {planning!r}: expected one of {', '.join(PLANNING)}")
    return planning


def budget_seconds() -> float:
    """The planning budget per call shape (``RING_PLAN_BUDGET``, default 1 s)."""
    text = os.environ.get(BUDGET_ENV, "1")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{BUDGET_ENV}={text!r}: give the seconds a new call shape may plan")
    return value


def slices_apart(nodes: int, nbytes: int, caches: tuple[int, int] | None = None) -> int:
    """Into how many slices a trial may cut an allreduce of ``nbytes`` per node, each run
    by another candidate (:attr:`Trial.pieces`): as many as keep every slice's data, on the
    ``nodes`` that share a host's memory, at least twice the last-level cache (``caches``:
    (L2, last-level) bytes, else this machine's), so a slice streams from memory as the
    whole call does and its time, scaled by size, is the call's.  1: the call is not cut."""
    last = (caches or cache_bytes())[1]
    return max(1, nodes * nbytes // (2 * last))


@lru_cache(maxsize=256)
def shape_key(backend: str, collective: str, nodes: int, dtype, op, nbytes: int, fixed) -> str:
    """The wisdom key of a call shape: sizes up to the next power of two plan together."""
    log2 = max(0, (max(nbytes, 1) - 1).bit_length())
    return f"{backend}|{collective}|{nodes}|{dtype}|{op}|{log2}|{fixed}"


_STALE = object()


@dataclass
class Trial:
    """The candidates of one call shape as its first calls try them."""

    candidates: list[tuple]
    budget: float
    # Per candidate, seconds it cannot beat (measured, e.g. waking worker threads): it waits
    # until those without one are timed, and is not tried when one of them is faster.
    floors: dict[tuple, float] = field(default_factory=dict)
    times: dict[tuple, list[float]] = field(default_factory=dict)
    spent: float = 0.0
    # Candidates whose first call ran: it makes the candidate's plan and binds it (a cold
    # call, many times a warm one), so it is not timed, or the first candidate tried would
    # win by being the only one ever timed warm.
    warmed: set = field(default_factory=set)
    # The run of each candidate's first call, its plan's making left out: what stands for a
    # candidate the budget ends before timing (at 1 GiB, a call is half the budget).
    firsts: dict[tuple, float] = field(default_factory=dict)
    refining: bool = False  # a second trial, of its first's winner against variants of it
    # How many candidates one call may run, each on its own slice of the buffers (a
    # planner's choice, see share()); 1: a call is one candidate's.
    pieces: int = 1
    # Candidates a planner has compared with the others already (the cpu's, by their
    # plans' units): not compared again as they first run.
    screened: set = field(default_factory=set)
    # Each timed candidate's least time as its times come, and the next call's candidates once
    # found (_STALE after a call is recorded): a trial call asks for them twice.
    _least: dict = field(default_factory=dict, init=False, repr=False)
    _group: object = field(default=None, init=False, repr=False)
    _shares: int = field(default=0, init=False, repr=False)  # calls that ran several
    # The candidates that may run again, in order, without a floor and with one: one
    # found out (timed enough, slower than DROP times the best, or a floor above it) stays
    # out, as the best only falls.  Each one's place in the order.
    _open: list = field(default_factory=list, init=False, repr=False)
    _floored: list = field(default_factory=list, init=False, repr=False)
    _rank: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._least = {c: min(t) for c, t in self.times.items()}
        self._group = _STALE
        self._open = [c for c in self.candidates if not self.floors.get(c)]
        self._floored = [c for c in self.candidates if self.floors.get(c)]
        self._rank = {c: k for k, c in enumerate(self.candidates)}

    def next(self) -> tuple | None:
        """The candidate the next call runs (round robin in the prior's order, so drift
        during the trial falls on every candidate alike), or None when planning is over;
        the first of :meth:`share` where a call runs several."""
        group = self.share()
        return group[0] if group else None

    def share(self) -> list[tuple]:
        """The candidates the next call runs, up to :attr:`pieces` of them, each on an
        equal slice of the buffers, in slice order (an allreduce is element-wise, so every
        slice's result is right whichever candidate made it): where one call is a good
        part of the budget, one call times several candidates, on the same memory at the
        same moment, instead of one.  Empty when planning is over."""
        if self._group is _STALE:
            self._group = self._find_group()
        return self._group  # type: ignore[return-value]

    def _find_group(self) -> list[tuple]:
        """:meth:`share` worked out: one pass over the candidates in play (a trial call at a
        few KiB asks it once, and takes a few µs itself)."""
        least, floors, times, warmed = self._least, self.floors, self.times, self.warmed
        best = min(least.values(), default=math.inf)
        cut = DROP * best
        # Once timed, a candidate's times count (within DROP of the best), else its floor;
        # while one without a floor is untimed, those with one wait (its time decides).
        left: list[tuple] = []  # (run already, calls timed, place, candidate)
        rank, still, untimed = self._rank, [], False
        for c in self._open:
            timed = times.get(c)
            if not timed:
                left.append((c in warmed, 0, rank[c], c))
                still.append(c)
                untimed = True
            elif len(timed) < REPEATS and least[c] <= cut:
                left.append((c in warmed, len(timed), rank[c], c))
                still.append(c)
        self._open = still
        if not untimed:
            still = []
            for c in self._floored:
                timed = times.get(c)
                if timed:
                    if len(timed) < REPEATS and least[c] <= cut:
                        left.append((c in warmed, len(timed), rank[c], c))
                        still.append(c)
                elif floors[c] <= best:
                    left.append((c in warmed, 0, rank[c], c))
                    still.append(c)
            self._floored = still
        # The fewest calls first; a candidate not yet run (its untimed first call) first.
        left.sort()
        group = [entry[3] for entry in left[: self.pieces]]
        if len(group) > 1:  # in another order each call: no candidate keeps one slice
            turn = self._shares % len(group)
            group = group[turn:] + group[:turn]
        if not group or len(warmed) < 2:
            return group
        # Not a call that would end past the budget (a candidate's time as known, else the
        # fastest's; several on equal slices take their mean), once two candidates have
        # run: choosing needs two.
        firsts = self.firsts
        guesses = [least[c] if c in least else firsts.get(c) for c in group]
        if None in guesses:
            known = self.scores()
            if not known:
                return group
            fastest = min(known.values())
            guesses = [fastest if g is None else g for g in guesses]
        if self.spent + sum(g or 0.0 for g in guesses) / len(guesses) > self.budget:
            return []
        return group

    def drop(self, candidate: tuple) -> None:
        """Try ``candidate`` no more (a planner found it the same as one tried)."""
        self.candidates = [c for c in self.candidates if c != candidate]
        self._open = [c for c in self._open if c != candidate]
        self._floored = [c for c in self._floored if c != candidate]
        self._group = _STALE

    def record(self, candidate: tuple, seconds: float, run: float | None = None) -> None:
        """One call's time; the process's planning cost counts it at once, so a shape still
        being planned when the process reports is counted too.  ``run``: of a first call,
        the time of its run alone (kept in :attr:`firsts`)."""
        self.spent += seconds
        self._group = _STALE
        spend(seconds)
        if candidate not in self.warmed:
            self.warmed.add(candidate)
            if run is not None:
                self.firsts[candidate] = run
            return
        self._timed(candidate, seconds)

    def record_share(self, seconds: dict[tuple, float], spent: float) -> None:
        """One call that ran several candidates (:meth:`share`): ``seconds``, each one's
        time for the whole buffers (its slice's, scaled by size), timed from its first
        run on (a slice past the caches is long beside making its plan, which is not
        timed); ``spent``: the call's."""
        self.spent += spent
        self._group = _STALE
        self._shares += 1
        spend(spent)
        for candidate, taken in seconds.items():
            self.warmed.add(candidate)
            self._timed(candidate, taken)

    def _timed(self, candidate: tuple, seconds: float) -> None:
        timed = self.times.setdefault(candidate, [])
        timed.append(seconds)
        self._least[candidate] = min(timed)

    def winner(self) -> tuple:
        """The candidate of least time (the first candidate if none ran): a timed one's
        least, or for one never timed its first run; of candidates that tie with it
        (:meth:`tied`), the first in the candidates' order."""
        tied = self.tied()
        return tied[0] if tied else self.candidates[0]

    def tied(self) -> list[tuple]:
        """The candidates within :data:`NOISE` of the fastest, in the candidates' order
        (those dropped on the way after them): one process's timings cannot rank them."""
        scores = self.scores()
        if not scores:
            return []
        cut = NOISE * min(scores.values())
        rank = {c: k for k, c in enumerate(self.candidates)}
        return sorted(
            (c for c, t in scores.items() if t <= cut), key=lambda c: rank.get(c, 1 << 30)
        )

    def scores(self) -> dict[tuple, float]:
        """Each candidate's time: the least of its timed calls, else its first run's.  The
        least, as FFTW's planner takes: noise, and the warming of a call's code and data
        while a trial goes on, only ever add time, and at a few µs they are most of the
        spread (a median of three would take the middle of a downward drift)."""
        untimed = {c: t for c, t in self.firsts.items() if c not in self.times}
        return untimed | self._least


class PlanningCost(NamedTuple):
    """What planning by measuring cost this process: calls that ran to plan, and their
    seconds."""

    calls: int
    seconds: float


_cost = PlanningCost(0, 0.0)
_cost_lock = threading.Lock()


def spend(seconds: float) -> None:
    """Count one call that ran to plan (kept apart from the wisdom file, which a rank that
    does not write plans never reads)."""
    global _cost
    with _cost_lock:
        _cost = PlanningCost(_cost.calls + 1, _cost.seconds + seconds)


def planning_cost() -> PlanningCost:
    """What planning cost this process since it started (or since :func:`forget_cost`)."""
    return _cost


def forget_cost() -> None:
    """Start counting the planning cost again from nothing."""
    global _cost
    with _cost_lock:
        _cost = PlanningCost(0, 0.0)


def _after_fork_in_child() -> None:
    """A lock another thread of the parent held at the fork would stay held in the child."""
    global _cost_lock
    _cost_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
