"""``--algorithm a,b,...``: which of the library's algorithms the ring backends run.

The names are the library's own (:data:`ring.schedule.ALGORITHMS`), so the harness accepts
exactly what ``algorithm=`` accepts.  A backend that executes the library's schedule lists
the algorithms it runs in ``Backend.algorithms`` (its default first) and gets each through
``Backend.algorithm`` before ``open``; a peer that runs one algorithm of its own
(numpy-direct, mpi-allreduce, nccl, seed-cpp) lists none, and its rows carry its own
backend name in the ``algorithm`` column: a figure of time per algorithm then shows each
peer as a line of its own, and no row has an empty key.
"""

from __future__ import annotations

from .. import schedule

__all__ = ["DEFAULT_ALGORITHM", "library_algorithms"]

DEFAULT_ALGORITHM = "ring"


def library_algorithms() -> tuple[str, ...]:
    """The algorithm names the library exposes, the default first."""
    return tuple(getattr(schedule, "ALGORITHMS", (DEFAULT_ALGORITHM,)))
