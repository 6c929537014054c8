"""The candidates a call shape's trial race tries: what the decision table leaves in for the
call's N and size (:func:`ring.auto.ranked`, the model's pick first, its first ``TOP``), then
any algorithm the table never priced (:func:`ring.auto.unpriced`: a table fitted before an
algorithm existed cannot rule it out).  The model prunes; the race decides.  Every backend
plans from this list; the cpu's crosses it with its executors (:mod:`ring.cpu.planning`)."""

from __future__ import annotations

from .. import auto
from ..communicator import check_auto_pick
from ..schedule import algorithms_of

__all__ = ["TOP", "table_candidates"]

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
