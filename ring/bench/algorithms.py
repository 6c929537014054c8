"""``--algorithm a,b,...``: which of the library's algorithms the ring backends run.

The names are the library's own (:data:`ring.schedule.ALGORITHMS`, then ``auto``), so the
harness accepts exactly what ``algorithm=`` accepts.  A backend that executes the library's
schedule lists the algorithms it runs in ``Backend.algorithms`` (its default first) and gets
each through ``Backend.algorithm`` before ``open``; a peer that runs one algorithm of its own
(numpy-direct, mpi-allreduce, nccl, seed-cpp) lists none, and its rows carry its own
backend name in the ``algorithm`` column: a figure of time per algorithm then shows each
peer as a line of its own, and no row has an empty key.  A row of ``auto`` also says, in the
``resolved`` column, which algorithm ``auto`` ran at its size.
"""

from __future__ import annotations

from .. import schedule

__all__ = ["DEFAULT_ALGORITHM", "RESOLVED_COLUMN", "library_algorithms", "resolved_columns"]

DEFAULT_ALGORITHM = "ring"
RESOLVED_COLUMN = "resolved"


def library_algorithms() -> tuple[str, ...]:
    """The algorithm names the library exposes, the default first and ``auto`` last."""
    return (*schedule.ALGORITHMS, schedule.AUTO)


def resolved_columns(
    backend: str, algorithm: str, nodes: int, nbytes: int, inline_bytes: int | None = None
) -> dict[str, str]:
    """``{"resolved": name}`` for a row of ``auto`` (the library's own cached choice for
    this allreduce, by the session's ``inline_bytes`` on cpu), nothing for a row of a
    fixed algorithm."""
    if algorithm != schedule.AUTO:
        return {}
    from ..planning.candidates import resolve_algorithm

    name = resolve_algorithm(backend, "allreduce", nodes, nbytes, algorithm, inline_bytes)
    return {RESOLVED_COLUMN: name}
