"""What ``algorithm="auto"`` may run: the decision table's estimate (:func:`resolve_algorithm`,
what ``planning="estimate"`` and every backend without a trial runs), and the candidates a
call shape's trial race tries: what the decision table leaves in for the
call's N and size (:func:`ring.auto.ranked`, the model's pick first, its first ``TOP``), then
any algorithm the table never priced (:func:`ring.auto.unpriced`: a table fitted before an
algorithm existed cannot rule it out).  The model prunes; the race decides.  Every backend
plans from this list; the cpu's crosses it with its executors (:mod:`ring.cpu.planning`)."""

from __future__ import annotations

from .. import auto
from ..schedule import ALGORITHMS, AUTO, algorithms_of

__all__ = ["TOP", "auto_generation", "check_auto_pick", "resolve_algorithm", "table_candidates"]

# The table's candidates a shape tries (the model prunes: its first few).
TOP = 3


def table_candidates(
    backend: str, collective: str, nodes: int, nbytes: int, inline_bytes: int | None = None
) -> list[str]:
    """The algorithms a call of ``nbytes`` per node on ``nodes`` tries, in the table's order,
    each checked to be one this library runs (``inline_bytes``: as :func:`ring.auto.ranked`)."""
    ranked = auto.ranked(backend, collective, nodes, nbytes, inline_bytes)[:TOP]
    unpriced = auto.unpriced(backend, collective, algorithms_of(collective))
    return list(dict.fromkeys(check_auto_pick(backend, a) for a in (*ranked, *unpriced)))


def resolve_algorithm(
    backend: str,
    collective: str,
    nodes: int,
    nbytes: int,
    algorithm: str,
    inline_bytes: int | None = None,
) -> str:
    """``algorithm``, or for ``auto`` the one the decision table names for this backend,
    collective, N and bytes per node (:func:`ring.auto.choose`, cached per call shape);
    ``inline_bytes``: the cpu communicator's, which says how its call runs."""
    if algorithm != AUTO:
        return algorithm
    return check_auto_pick(backend, auto.choose(backend, collective, nodes, nbytes, inline_bytes))


def check_auto_pick(backend: str, name: str) -> str:
    """``name``, a decision table's pick, if it is one of the library's algorithms (a table
    is data a user may write: it is refused naming its file, not run)."""
    if name not in ALGORITHMS:
        path = auto.table_for(backend)[1]
        raise auto.AutoTableError(f"{path}: the {backend} table names {name!r}")
    return name


# ring.auto.generation: while it stays, every pick already made stands (the function itself,
# not a wrapper: a bound auto call asks it every time).
auto_generation = auto.generation
