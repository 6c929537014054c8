"""How many collective calls ran on how many nodes, read off the step ranges alone.

A call on N nodes emits ``<phase> step s node i`` for every s < N - 1 and i < N, so the
count of ``step s node 0`` is the number of calls with N >= s + 2.
"""

from __future__ import annotations

from collections import defaultdict

from ..schedule.steps import ALL_GATHER, REDUCE_SCATTER

__all__ = ["PHASES", "calls_by_nodes"]

# The ring's phases in the order they run. ring.schedule.steps.PHASES adds the other
# algorithms' fold, exchange and unfold, whose step counts the arithmetic here does not fit.
PHASES = (REDUCE_SCATTER, ALL_GATHER)


def calls_by_nodes(step_rows: list[dict], phase: str) -> dict[int, int] | None:
    """Calls that ran ``phase`` per node count N, inferred from its step-range counts.

    ``None`` when the counts fit no mix of node counts (a cut-off profile, ranges of
    several processes with different counts ...); ``{}`` when the phase never ran.
    """
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for row in step_rows:
        if row["kind"] == "step" and row["phase"] == phase:
            counts[(int(row["step"]), int(row["node"]))] += int(row["count"])
    if not counts:
        return {}
    top = max(max(step + 2, node + 1) for step, node in counts)
    at_least = {k: counts.get((k - 2, 0), 0) for k in range(2, top + 1)}
    at_least[top + 1] = 0
    for (step, node), count in counts.items():
        if count != at_least[max(step + 2, node + 1)]:
            return None
    for k in range(2, top + 1):
        expected = {(s, i) for s in range(k - 1) for i in range(k)} if at_least[k] else set()
        if not expected <= counts.keys():
            return None
    calls = {k: at_least[k] - at_least[k + 1] for k in range(2, top + 1)}
    if any(value < 0 for value in calls.values()):
        return None
    return {k: v for k, v in calls.items() if v}
