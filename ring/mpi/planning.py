"""How an MPI call of ``algorithm="auto"`` is planned by measuring (:mod:`ring.planning`),
with every rank choosing the same plan.

The candidates are the table's (:func:`ring.planning.candidates.table_candidates`), raced
by :class:`ring.planning.race.Trial` as on every backend.  Each rank times its own run of a
candidate; the ranks then agree on the slowest rank's time (``allreduce(MAX)``): a
collective is as fast as its slowest rank, and every rank records the same time, so every
rank's trial takes the same turns and ends with the same plan.  What rank 0 knows (its
wisdom file's plan for the shape, or the candidates of its table) is broadcast when a
shape is first seen, so ranks on hosts with different wisdom or tables still agree; only
rank 0 writes the plan to its wisdom file.  A large allreduce's trial call is cut into one
slice per candidate (:func:`ring.planning.race.slices_apart`, rank 0's count of slices), each
agreed on and run as a call of its own, each slice's time agreed on the same way.

No collective is entered before the call's pre-flight exchange (:mod:`ring.mpi.agree`)
has passed on every rank: a first call of a shape is agreed on as ``auto``'s estimate
before the broadcast, and each trial call is agreed on as its candidate, every row saying
that the call measures and with what budget.  So a rank whose call differs (another
algorithm, ``planning=``, budget), or whose buffer is bad, makes every rank raise the same
error, as in any other call, instead of leaving the others waiting in a planning message.
What rank 0 alone does (read its wisdom and table, cut the call) travels in the
broadcast, a failure included, which every rank then raises alike; its writing of the plan
never raises.
"""

from __future__ import annotations

import time
import warnings

from .. import auto
from ..planning import race, store
from ..planning.candidates import table_candidates
from .agree import agreed_exception, riding_pick

__all__ = ["MpiPlanner"]

# Plans and trials kept per ring (form keys: collective, op, dtype, length, options, shared).
_KEPT = 256


class MpiPlanner:
    """The plans of one ring's call shapes, and the trials still under way; every method
    that communicates is called by every rank alike."""

    def __init__(self, comm, rank: int, nodes: int, max_op):
        self._comm, self.rank, self.nodes, self._max = comm, rank, nodes, max_op
        self._plans: dict[tuple, tuple] = {}  # form key -> the settings the call runs by
        self._trials: dict[tuple, tuple[race.Trial, str]] = {}

    def planned(self, key: tuple) -> tuple | None:
        """The settings a call of form ``key`` runs by, once its shape is planned."""
        return self._plans.get(key)

    def _settle(self, key: tuple, settings: tuple, algorithm: str) -> tuple:
        if len(self._plans) >= _KEPT:
            self._plans.clear()
        planned = self._plans[key] = (settings[0], algorithm, settings[2])
        return planned

    def start(
        self, key: tuple, name: str, form, nbytes: int, settings: tuple, abort, sharing: int = 0
    ):
        """After a first call of ``key`` was agreed on (its estimate ``form``, which holds
        the budget every rank agreed on): the plan rank 0 knows, settled, or None with a
        trial begun on every rank.  ``abort(name, when)``: the ring's, for a rank that
        fails inside the broadcast (the ring is not kept here: a dropped ring must be freed
        without the cyclic collector).  ``sharing``: the ranks that share a host's cache,
        where a trial call may be cut into slices (0: it may not; rank 0's cut,
        :func:`ring.planning.race.slices_apart`, is every rank's)."""
        known: tuple | None = None
        found: list[tuple] = []
        problem: tuple | None = None
        apart = 1
        shape = race.shape_key(
            "mpi", name, self.nodes, key[2], form.op, nbytes, (settings[0], settings[2], key[5])
        )
        if self.rank == 0:
            try:
                known = store.wisdom().get(shape)  # a plan of this library's (checked read)
                if known is None:
                    riding = riding_pick(name, self.nodes, nbytes)  # by rule: ring.mpi.agree
                    algorithms = (
                        (riding,) if riding else table_candidates("mpi", name, self.nodes, nbytes)
                    )
                    found = [(a,) for a in algorithms]
                    apart = race.slices_apart(sharing, nbytes) if sharing else 1
            except Exception as exc:  # noqa: BLE001 - raised on every rank, after the broadcast
                problem = (str(exc), type(exc).__module__, type(exc).__qualname__)
        try:
            known, found, problem, apart = self._comm.bcast((known, found, problem, apart), root=0)
        except BaseException:  # noqa: BLE001 - the peers wait in the broadcast
            abort(name, "while planning")
        if problem is not None:
            text, module, qualname = problem
            if qualname == auto.AutoTableError.__qualname__:
                raise auto.AutoTableError(f"{text} (rank 0's table)")
            raise agreed_exception(
                f"ring.mpi {name}: planning failed on rank 0: {text}", module, qualname
            )
        if known is not None:
            return self._settle(key, settings, known[0])
        if len(found) == 1:  # nothing to choose between
            return self._settle(key, settings, found[0][0])
        if len(self._trials) >= _KEPT:
            self._trials.clear()
        pieces = min(len(found), apart)
        self._trials[key] = (race.Trial(found, form.budget, pieces=pieces), shape)
        return None

    def trial(self, key: tuple) -> race.Trial | None:
        entry = self._trials.get(key)
        return None if entry is None else entry[0]

    def next(self, key: tuple, settings: tuple) -> tuple:
        """``(settings, candidate)`` of the next trial call of ``key``: a candidate's, or
        the plan's with candidate None once the trial is over (then kept)."""
        trial, shape = self._trials[key]
        candidate = trial.next()
        if candidate is not None:
            return (settings[0], candidate[0], settings[2]), candidate
        del self._trials[key]
        if self.rank == 0:  # the others go on to the plan's call: this rank must too
            try:
                store.wisdom().put(shape, trial, "mpi", key[0])
            except Exception as exc:  # noqa: BLE001 - said, and the plan kept in memory
                warnings.warn(f"wisdom not kept: {exc}", store.WisdomWarning, stacklevel=2)
        return self._settle(key, settings, trial.winner()[0]), None

    def share(self, key: tuple) -> list[tuple]:
        """The candidates of the trial's next call, one per slice (one: a whole call)."""
        return self._trials[key][0].share()

    def timed_share(self, name: str, key: tuple, runs: list, abort) -> None:
        """``runs``: per slice, (candidate, scale, run()), run in turn on every rank; each
        slice's slowest rank's time, scaled to the whole call, is its candidate's."""
        mine, started = [], time.perf_counter()
        for _, scale, run in runs:
            begun = time.perf_counter()
            run()
            mine.append((time.perf_counter() - begun) * scale)
        mine.append(time.perf_counter() - started)
        try:
            slowest = [self._comm.allreduce(t, op=self._max) for t in mine]
        except BaseException:  # noqa: BLE001 - the peers wait for the times
            abort(name, "while planning")
        seconds = {run[0]: t for run, t in zip(runs, slowest, strict=False)}
        self._trials[key][0].record_share(seconds, slowest[-1])

    def timed(self, name: str, key: tuple, candidate: tuple, run, abort) -> None:
        """``run()``, timed on every rank; the slowest rank's time is the candidate's.  A
        candidate's first call (which makes its program) is not timed, but its time
        stands for the candidate where the budget ends before a timed call (at 1 GiB one
        call can take a third of the budget)."""
        started = time.perf_counter()
        run()
        mine = time.perf_counter() - started
        try:
            slowest = self._comm.allreduce(mine, op=self._max)
        except BaseException:  # noqa: BLE001 - the peers wait for the time
            abort(name, "while planning")
        self._trials[key][0].record(candidate, slowest, run=slowest)
