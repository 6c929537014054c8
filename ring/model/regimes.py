"""The cpu backend's two regimes: calls run inline on one thread, and calls run threaded.

The cpu backend (ring.cpu) runs a call of at most ``inline_bytes`` bytes per node (default
:data:`ring.cpu.INLINE_BYTES`, 4 MiB) on the calling thread, every node's step in turn, and
a larger call on its N worker threads.  The two cost different things: inline, no thread
is woken (no hand-over latency) but one core does every node's copies and reductions;
threaded, each step waits on a hand-over and the nodes share the cores and the memory bus.
No one α, β, γ follows the switch: fitted across it, the reference sweep (amd-epyc-2core)
had 12 and 24 of 49 held-out points within 25 % at N = 2 and 4.

So a group whose rows carry the backend's ``inline`` column with both values is fitted as
two: each regime has its own α, β, γ, σ, knee and per-algorithm factors, fitted on its own
rows only (ring.model.fit), and a prediction takes the regime the call would run in, by the
communicator's rule (:func:`runs_inline`).  The held-out check splits the whole group's sizes
(every other size trains, the ones between are predicted) and predicts each held-out size
by its own regime's fit.  A group with rows of one regime only (an MPI or GPU group, a CPU
sweep wholly below or above the threshold, or a CSV from before the column) is one fit as
before, used at every size.

On the reference CPU sweep (ring/model/defaults/amd-epyc-2core) the regimes take the
held-out points within 25 % (>= 4 KiB) from 12 and 24 to 29 and 31 of 49 at N = 2 and 4;
most misses left are at 8, 32 and 512 KiB, sizes the sweep measured slower than both
neighbours (the auto check run at 07:02 UTC, measured after the sweep, had 8 and 32 KiB in
line with theirs).  The picks judged on that run (check-picks) move from 31 to 29 of 34
sizes within 1.1x: 64 MiB at N = 2 (1.26x, where that run's auto and its own fixed series of
the same algorithm differ by as much) and 4 MiB at N = 4 (1.11x).  An inline call pays
every node's steps on one thread, so its step terms could be N times the critical path's;
priced so, the fit followed the sweep worse (23 and 25 of 49), so the steps stay the
critical path's, their cost per step the inline regime's own α.
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
