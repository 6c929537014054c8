"""What the CPU backend's workers synchronise with, worked out once per plan.

Synchronisation uses one ``queue.SimpleQueue`` per node as a counting signal: it is
implemented in C, a blocking ``get`` costs one lock round trip like a raw lock (a
``threading.Barrier`` or ``Condition`` costs several), and a count lets a producer run
ahead of its consumer without a separate signal per step, so the state stays linear in N.

* ``sync="pairwise"``: a node waits only for the peers its step ``waits`` for, one queue
  per (peer, node) pair: after step ``t`` node ``j`` puts a token in the queue of every
  node whose step ``t + 1`` waits for it, which takes one before that step.  On the ring
  node ``i`` waits only for its left neighbour, as the original study's GPU code does
  with events; non-neighbours run ahead.  This is enough: node ``i`` at step ``t``
  transitively waits for node ``i + 1`` at step ``t - (N - 1)``, the last step at which
  node ``i + 1`` reads a chunk that node ``i`` overwrites at step ``t``
  (``tests/test_schedule.py`` checks every hazard of every algorithm).  ring-segmented's
  blocks touch disjoint ranges, so this holds block by block and a block's first step
  waits for no one: one wakeup fewer per block.  A plan whose
  waits pair more than ``8 N`` nodes (``direct``) runs with the barrier instead.
* ``sync="barrier"``: after every step all nodes wait for each other, as the original
  study's CPU code does with ``std::barrier``.  The last node to arrive puts a token in
  every other node's ``ready`` queue.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any, NamedTuple

from .. import nvtx
from ..schedule import COLLECTIVES, RING_FAMILY, Plan, plan

__all__ = [
    "PAIRS_PER_NODE",
    "STEP_RANGE_MAX_NODES",
    "Between",
    "Program",
    "Pushers",
    "no_range",
    "node_pushers",
    "program",
]

# Per-step NVTX ranges are named for communicators up to this size.  A call makes
# 2N(N - 1) step ranges, more than a profile can show beyond this; above it only the call's
# outer range is recorded, and every node shares one table of no-op ranges, so the state
# stays linear in N.
STEP_RANGE_MAX_NODES = 64
# A plan whose waits pair more nodes than this many per node runs with the barrier.
PAIRS_PER_NODE = 8

Pushers = dict[str, tuple[Callable[[], Any], ...]]


def no_range() -> None:
    """Push and pop of a step above STEP_RANGE_MAX_NODES: records nothing."""


def node_pushers(nodes: int) -> list[Pushers]:
    """Per node and collective, the NVTX range pusher of each of the node's ring steps."""
    if nodes > STEP_RANGE_MAX_NODES:
        shared = {c: (no_range,) * plan(c, nodes, 0).steps for c in COLLECTIVES}
        return [shared] * nodes
    return [
        {
            c: tuple(nvtx.pusher(s.name) for s in plan(c, nodes, 0).node_steps(node))
            for c in COLLECTIVES
        }
        for node in range(nodes)
    ]


class Between:
    """``value`` at every step ``t`` but those where ``(t + shift) % period == 0``, nothing
    there: one node's queues when they are the same at every step but a block's first (the
    ring family, whose blocks are independent ring passes of ``period`` steps), in O(1)
    state.  A node takes tokens before every step but a block's first (shift 0) and puts
    them after every step but a block's last (shift 1)."""

    __slots__ = ("period", "shift", "value")

    def __init__(self, value: tuple, period: int, shift: int):
        self.value, self.period, self.shift = value, period, shift

    def __getitem__(self, t: int) -> tuple:
        return self.value if (t + self.shift) % self.period else ()


class Program(NamedTuple):
    """One node's part of a plan: its step pushers, and with pairwise sync the queues it
    takes a token from before each step and those it puts one in after (None: use the
    barrier)."""

    pushers: tuple
    gets: Any
    puts: Any


def program(steps: Plan, pushers: list[Pushers], pairwise: bool, pairs: dict) -> list[Program]:
    """Every node's :class:`Program` for ``steps``; the queues of new (peer, node) pairs
    are added to ``pairs``, which the communicator keeps for every later plan."""
    n = steps.nodes
    if steps.algorithm == "ring":
        mine = [p[steps.collective] for p in pushers]
    elif n > STEP_RANGE_MAX_NODES:
        mine = [(no_range,) * steps.steps] * n
    else:
        mine = [tuple(nvtx.pusher(s.name) for s in steps.node_steps(i)) for i in range(n)]
    waits = _waits(steps)
    used = {
        (j, i)
        for i in range(n)
        for per_step in ((waits[i].value,) if isinstance(waits[i], Between) else waits[i])
        for j in per_step
    }
    if not pairwise or len(used) > PAIRS_PER_NODE * n:
        return [Program(p, None, None) for p in mine]
    for pair in used:
        pairs.setdefault(pair, queue.SimpleQueue())
    gets, puts = _queues(waits, steps.steps - 1, pairs)
    return [Program(*node) for node in zip(mine, gets, puts, strict=True)]


def _queues(waits: list, last: int, pairs: dict) -> tuple[list, list]:
    """Per node, the queues its steps take tokens from and put them in."""
    n = len(waits)
    gets: list = []
    puts: list = []
    for i in range(n):
        if isinstance(waits[i], Between):
            w = waits[i].value
            period = waits[i].period
            gets.append(Between(tuple(pairs[j, i] for j in w), period, 0))
            takers = tuple(pairs[i, k] for k in range(n) if i in waits[k].value)
            puts.append(Between(takers, period, 1))
        else:
            gets.append([tuple(pairs[j, i] for j in w) for w in waits[i]])
            puts.append(
                [tuple(pairs[i, k] for k in range(n) if i in waits[k][t + 1]) for t in range(last)]
                + [()]
            )
    return gets, puts


def _waits(steps: Plan) -> list:
    """Per node, the peers each step waits for; in the ring family the same at every
    step but the first of each block (:class:`Between`)."""
    n = steps.nodes
    if steps.algorithm in RING_FAMILY:
        period = steps.steps // steps.blocks
        if period < 2:
            return [Between((), 1, 0)] * n
        return [Between(steps.node_steps(i)[1].waits, period, 0) for i in range(n)]
    return [[s.waits for s in steps.node_steps(i)] for i in range(n)]
