"""How a GPU call of ``algorithm="auto"`` is planned by measuring (:mod:`ring.planning`).

The candidates are the table's (:func:`ring.planning.candidates.table_candidates`), raced by
:class:`ring.planning.race.Trial` as on every backend: the first calls of a call shape run
by them in turn, each a call the caller asked for, so its result is right whichever ran it.
A call the host waits for is timed on the host around the whole call (its queueing and its
device work, as a caller sees it); a call ordered on the caller's streams, or returning a
handle, is not waited for, so it runs by the best candidate so far and times nothing.  The
winner is kept in the wisdom file (:mod:`ring.planning.store`), as the cpu's and mpi's are.
"""

from __future__ import annotations

import threading

from .. import auto
from ..planning import race, store
from ..planning.candidates import table_candidates

__all__ = ["GpuPlanner"]


class GpuPlanner:
    """The plans of one GPU communicator's call shapes, and the trials still under way."""

    def __init__(self, nodes: int):
        self.nodes = nodes
        self._plans: dict[str, str] = {}
        self._trials: dict[str, race.Trial] = {}
        self._generation = (auto.generation(), store.generation())
        self._lock = threading.Lock()

    def choose(
        self, name: str, dtype: str, op: str | None, nbytes: int, timed: bool
    ) -> tuple[str, race.Trial | None]:
        """The algorithm a call runs, and the trial to record its time in (None: the shape
        is planned, or the call cannot be timed, ``timed`` False)."""
        key = race.shape_key("gpu", name, self.nodes, dtype, op, nbytes, ())
        with self._lock:
            if self._generation != (auto.generation(), store.generation()):
                self._plans, self._trials = {}, {}  # other tables or wisdom: measure again
                self._generation = (auto.generation(), store.generation())
            planned = self._plans.get(key)
            if planned is not None:
                return planned, None
            known = store.wisdom().get(key)
            if known is not None:
                self._plans[key] = known[0]
                return known[0], None
            trial = self._trials.get(key)
            if trial is None:
                found = [(a,) for a in table_candidates("gpu", name, self.nodes, nbytes)]
                trial = self._trials[key] = race.Trial(found, race.budget_seconds())
            if not timed:
                return trial.winner()[0], None
            candidate = trial.next() if len(trial.candidates) > 1 else None
            if candidate is not None:
                return candidate[0], trial
            del self._trials[key]
            store.wisdom().put(key, trial, "gpu", name)
            planned = self._plans[key] = trial.winner()[0]
            return planned, None
