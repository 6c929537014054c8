"""What a plan is made of: chunk arithmetic and the step shape every backend executes.

The shape (one for every algorithm):

* a :class:`Plan` gives each node the same number of :class:`Step` s, in order;
* at a step a node applies its :class:`Move` s in order: each reads the element range
  ``src`` of node ``peer``'s buffer (or, with ``from_scratch``, of this node's own scratch,
  and then ``peer`` is the node itself) and accumulates it with the op into, or copies it
  over, the range ``dst`` of this node's buffer (or, with ``to_scratch``, of its scratch).
  A step may hold several moves (two rings, N - 1 peers) or none (an idle node);
* ``sends`` lists what peers' moves read from this node's buffer at this step, one
  :class:`Send` per such move; the sends to one peer are in the order that peer applies
  the moves (message passing pairs them one for one; shared memory ignores them);
* ``waits`` names the peers whose previous step must have ended before this step starts
  (shared memory; a node's own previous step is always waited for).  With them every
  read sees the writes it depends on and no write overtakes a read of the old value;
  within one step no node reads a range that another node writes (the plans never need
  it: an exchange that would goes through scratch), which ``tests/test_schedule.py``
  checks for every algorithm;
* ``source_first`` on an accumulating move makes the arriving range the op's left operand
  (``dst = src op dst``, not ``dst = dst op src``).  A plan in which two nodes both reduce
  the same pair of partial results (recursive doubling's exchange) sets it so that both
  compute ``lower node's partial op higher node's``: NumPy's complex multiply (and a
  GPU kernel's) is not bitwise commutative, and every node must end with the same bits;
* ``completes`` on a move marks that its ``dst`` holds the full reduction on this node
  afterwards, where an op that finishes the reduction (``avg``) applies its last touch;
  every element of a node's result is completed exactly once, or copied from a node that
  completed it.

A node only ever writes its own buffer and its own scratch, so a plan's hazards are all
between one writer and its readers.  Element ``j`` of every buffer is element ``j`` of
the collective: moves between buffers have ``src == dst``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal, NamedTuple

__all__ = [
    "ALL_GATHER",
    "COLLECTIVES",
    "COLLECTIVE_PHASES",
    "PHASES",
    "REDUCE_SCATTER",
    "Move",
    "Send",
    "Step",
    "check_collective",
    "check_int",
    "chunk_bounds",
    "chunk_range",
    "span",
]

REDUCE_SCATTER: Literal["reduce_scatter"] = "reduce_scatter"
ALL_GATHER: Literal["all_gather"] = "all_gather"
PhaseName = Literal["reduce_scatter", "all_gather"]

# Which schedule phases each collective runs.
COLLECTIVE_PHASES: dict[str, tuple[PhaseName, ...]] = {
    "allreduce": (REDUCE_SCATTER, ALL_GATHER),
    "reduce_scatter": (REDUCE_SCATTER,),
    "all_gather": (ALL_GATHER,),
}
COLLECTIVES = tuple(COLLECTIVE_PHASES)


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    number = value.__index__()
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def chunk_range(total: int, num_chunks: int, index: int) -> tuple[int, int]:
    """Element range ``[start, stop)`` of chunk ``index`` when ``total`` elements are
    split into ``num_chunks`` pieces that differ in length by at most one.

    The first ``total % num_chunks`` chunks hold one extra element; when ``total`` is
    smaller than ``num_chunks`` the trailing chunks are empty.
    """
    total = check_int("total", total, 0)
    num_chunks = check_int("num_chunks", num_chunks, 1)
    index = check_int("index", index)
    if not 0 <= index < num_chunks:
        raise ValueError(f"index must be in [0, {num_chunks}), got {index}")
    return span(total, num_chunks, index)


def span(total: int, num_chunks: int, index: int) -> tuple[int, int]:
    """:func:`chunk_range` of arguments already checked."""
    base, extra = divmod(total, num_chunks)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def check_collective(name: object) -> str:
    if not isinstance(name, str) or name not in COLLECTIVE_PHASES:
        raise ValueError(f"unknown collective {name!r}: expected one of {', '.join(COLLECTIVES)}")
    return name


@lru_cache(maxsize=1024)
def chunk_bounds(length: int, nodes: int) -> tuple[tuple[int, int], ...]:
    """:func:`chunk_range` of every chunk, cached because calls repeat the same sizes."""
    length = check_int("total", length, 0)
    nodes = check_int("num_chunks", nodes, 1)
    return tuple(span(length, nodes, c) for c in range(nodes))


# Every phase name a step can carry, in the order they run.  ``fold`` and ``unfold`` are
# MPICH's steps for a node count that is not a power of two (the extra nodes hand their
# data to a partner first and take the result last); ``exchange`` is recursive doubling's;
# ``reduce`` or ``gather`` (into node 0), then ``broadcast`` or ``scatter`` (out of it), are
# reduce-broadcast's.
PHASES = (
    "fold",
    "reduce",
    "gather",
    REDUCE_SCATTER,
    "exchange",
    ALL_GATHER,
    "scatter",
    "broadcast",
    "unfold",
)

Range = tuple[int, int]


class Move(NamedTuple):
    """One range arriving at a node within a step (see the module docstring)."""

    peer: int
    src: Range
    dst: Range
    accumulate: bool
    completes: bool = False
    from_scratch: bool = False
    to_scratch: bool = False
    source_first: bool = False


class Send(NamedTuple):
    """The elements ``src`` of this node's buffer that ``peer`` takes at this step."""

    peer: int
    src: Range


class Step(NamedTuple):
    """What one node does at one step of a collective.  (A tuple, not a dataclass: a ring
    plan for 1024 nodes has two million of them.)"""

    algorithm: str
    phase: str
    number: int  # the step's number within its phase
    node: int
    moves: tuple[Move, ...]
    sends: tuple[Send, ...]
    waits: tuple[int, ...]

    @property
    def name(self) -> str:
        """The NVTX range name of this step on this node (see :mod:`ring.nvtx`):
        the ring's names carry no algorithm, every other algorithm's do."""
        name = f"{self.phase} step {self.number} node {self.node}"
        return name if self.algorithm == "ring" else f"{self.algorithm} {name}"
