"""The cpu backend's two regimes: calls run inline on one thread, and calls run threaded.

The cpu backend (ring.cpu) runs a call of at most ``inline_bytes`` bytes per node (default
:data:`ring.cpu.INLINE_BYTES`) on the calling thread, every node's step in turn, and a
larger call on its N worker threads.  The two cost different things: inline, no thread is
woken (no hand-over latency) but one core does every node's copies and reductions;
threaded, each step waits on a hand-over and the nodes share the cores and the memory bus.
No one α, β, γ follows the switch.

So a group whose rows carry the backend's ``inline`` column with both values is fitted as
two: each regime has its own α, β, γ, σ, knee and per-algorithm factors, fitted on its own
rows only (ring.model.fit), and a prediction takes the regime the call would run in, by the
communicator's rule (:func:`runs_inline`).  The held-out check splits the whole group's sizes
(every other size trains, the ones between are predicted) and predicts each held-out size
by its own regime's fit.  A group with rows of one regime only (an MPI or GPU group, a CPU
sweep wholly below or above the threshold, or a CSV from before the column) is one fit, used
at every size.

How an inline call is priced (ring.model.costs.terms).  One thread runs every node's moves
of the plan in turn, one NumPy call each, so the step term counts the plan's moves
(:func:`ring.model.costs.inline_moves`: at N = 4, recursive doubling 16, the ring,
Rabenseifner, hierarchical and direct 24, the bidirectional ring 48), α is the cost of one
move, and each node adds ``per_node`` to the call (its buffer checked, its view and steps
looked up).  The critical path's steps, with no constant per call, would rank the
algorithms by their steps rather than by what the calling thread does, and at N = 2, where
every algorithm takes 2 steps, by factors fitted to N = 4.

The measurements behind these choices: docs/notes/model-forms.md.
"""

from __future__ import annotations

from .data import Group

__all__ = ["INLINE", "ONE", "THREADED", "runs_inline", "split", "threshold"]

ONE = ""  # every row of the group: no regimes told apart
INLINE = "inline"  # calls on the calling thread, node after node
THREADED = "threaded"  # calls on the N worker threads


def runs_inline(nodes: int, nbytes: int, inline_bytes: int) -> bool:
    """Whether the cpu backend runs this call on the calling thread (ring.cpu's rule)."""
    return nodes > 1 and 0 < nbytes <= inline_bytes


def threshold(group: Group) -> int:
    """The ``inline_bytes`` the group's rows ran with: its column, else the largest size
    that ran inline."""
    recorded = group.key.get("inline_bytes", "")
    if recorded.isdigit():
        return int(recorded)
    return max((p.nbytes for p in group.points if p.inline), default=0)


def _part(group: Group, inline: bool) -> Group:
    return Group(
        dict(group.key),
        group.shared,
        [p for p in group.points if p.inline == inline],
        list(group.sources),
        list(group.add_ceilings_GBps),
        group.cores,
        group.caches,
    )


def split(group: Group) -> tuple[Group, Group] | None:
    """(threaded, inline) parts of a group with rows of both regimes, else None."""
    kinds = {p.inline for p in group.points}
    if kinds != {False, True}:
        return None
    return _part(group, False), _part(group, True)
