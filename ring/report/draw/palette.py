"""One colour per implementation, the same in every figure of a report.

Peers and the plain ring in its ways of running take the first colours (tab10, the most
distinct), in a fixed order, so numpy-direct or MPI_Allreduce is the same colour in every
figure and every report; other series follow in the order of their names.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["FIXED", "palette"]

FIXED = (
    "cpu ring (nodes)",
    "numpy-direct",
    "seed-cpp (the original's C++ design)",
    "cpu ring (nodes, barrier sync)",
    "mpi ring (host buffers)",
    "MPI_Allreduce (host buffers)",
    "cpu ring (slices)",
    "mpi ring (shared buffers)",
    "MPI_Allreduce (shared buffers)",
    "MPI_Allreduce",
)


def palette(names: Iterable[str]) -> dict[str, tuple]:
    """A colour for each name: the fixed ones first, then the rest by name."""
    import seaborn as sns

    names = set(names)
    ordered = [n for n in FIXED if n in names] + sorted(names - set(FIXED))
    fixed = sns.color_palette("tab10", 10)
    extra = sns.color_palette("husl", max(1, len(ordered)))
    colours = {}
    for index, name in enumerate(ordered):
        slot = FIXED.index(name) if name in FIXED else None
        colours[name] = fixed[slot] if slot is not None else extra[index % len(extra)]
    return colours
