"""Which stream every move of a plan runs on, and which events it waits for, derived from
the byte ranges the moves read and write (several streams per node).

A plan's ``waits`` order whole steps: a node's step ``t`` follows its own step ``t - 1``
and some peers' steps ``t - 1``.  On one stream per node that serialises everything a
node does, though much of it is independent: ``ring-segmented``'s blocks are disjoint
ranges, so node ``i``'s copy of block ``k + 1`` needs nothing from its reduction of block
``k``.  With several streams per node each move instead waits for exactly the moves its
ranges depend on, in the order the plan lists them (step by step, node by node, move by
move), which is an order a sequential executor may run them in:

* read after write: the last move that wrote a range this move reads (the peer's buffer
  range, its own scratch, and its own destination when it accumulates);
* write after write and write after read: the last writer of the destination and every
  move that read it since.

A move goes on the stream of the dependency it continues (the latest one: a chain of
dependent moves stays on one stream and needs no event between its links); a move with
no dependency starts a chain on the node's next stream, round-robin.  A wait that stream
order and the other waits already imply is left out.  Nothing here is specific to one
algorithm; the result depends only on the plan and the stream count, so it is computed
once per pair (:func:`stream_schedule`).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache

from ..schedule import Plan

__all__ = ["MoveOp", "StreamSchedule", "stream_schedule"]


@dataclass(frozen=True, slots=True)
class MoveOp:
    """Move ``index`` of ``node``'s step ``step``: queued on the node's stream ``stream``
    after waiting for the events ``waits`` ((node, event) pairs, events of the nodes that
    own them); ``record`` is the event to record after it on its node, or -1."""

    node: int
    step: int
    index: int
    stream: int
    waits: tuple[tuple[int, int], ...]
    record: int


@dataclass(frozen=True)
class StreamSchedule:
    """Every move in queueing order, the stream count, per node how many events it
    records (``events[node]``), the (node, stream) pairs other than node 0's first stream
    that run something (``forks``: they start after it), and the (node, stream, event)
    whose last move node 0's first stream must still wait for at the end (``joins``)."""

    streams: int
    ops: tuple[MoveOp, ...]
    events: tuple[int, ...]
    forks: tuple[tuple[int, int], ...]
    joins: tuple[tuple[int, int, int], ...]


class _Ranges:
    """One memory region's element ranges, each with its last writer and the readers since
    (move ids); boundaries split as ranges arrive."""

    def __init__(self) -> None:
        self.starts: list[int] = [0]
        self.writers: list[int] = [-1]
        self.readers: list[frozenset[int]] = [frozenset()]

    def _split(self, at: int) -> int:
        i = bisect_right(self.starts, at) - 1
        if self.starts[i] != at:
            i += 1
            self.starts.insert(i, at)
            self.writers.insert(i, self.writers[i - 1])
            self.readers.insert(i, self.readers[i - 1])
        return i

    def span(self, a: int, b: int) -> range:
        lo = self._split(a)
        return range(lo, self._split(b))

    def read(self, a: int, b: int, op: int) -> set[int]:
        deps: set[int] = set()
        for i in self.span(a, b):
            deps.add(self.writers[i])
            self.readers[i] = self.readers[i] | {op}
        return deps

    def write(self, a: int, b: int, op: int) -> set[int]:
        deps: set[int] = set()
        for i in self.span(a, b):
            deps.add(self.writers[i])
            deps |= self.readers[i]
            self.writers[i] = op
            self.readers[i] = frozenset()
        return deps


def _dependencies(plan: Plan) -> list[tuple[int, int, int, set[int]]]:
    """(node, step, index, ids of the earlier moves it depends on) of every move, in
    queueing order; a move's id is its position in the list."""
    regions: dict[tuple[int, bool], _Ranges] = {}

    def region(node: int, scratch: bool) -> _Ranges:
        return regions.setdefault((node, scratch), _Ranges())

    per_node = [plan.node_steps(i) for i in range(plan.nodes)]
    moves: list[tuple[int, int, int, set[int]]] = []
    for t in range(plan.steps):
        for node, steps in enumerate(per_node):
            for index, m in enumerate(steps[t].moves):
                a, b = m.src
                if a == b:
                    continue  # an empty range: nothing is queued for it
                op = len(moves)
                source = region(node if m.from_scratch else m.peer, m.from_scratch)
                deps = source.read(a, b, op)
                deps |= region(node, m.to_scratch).write(*m.dst, op)
                deps.discard(-1)
                deps.discard(op)
                moves.append((node, t, index, deps))
    return moves


def _place(moves: list[tuple[int, int, int, set[int]]], nodes: int, streams: int) -> list[int]:
    """The stream of every move: its latest dependency's on this node, else its latest
    dependency's anywhere, else the node's next stream in turn."""
    placed: list[int] = []
    turn = [0] * nodes
    for node, _, _, deps in moves:
        if deps:
            mine = [d for d in deps if moves[d][0] == node]
            placed.append(placed[max(mine or deps)])
        else:
            placed.append(turn[node])
            turn[node] = (turn[node] + 1) % streams
    return placed


def _needed(
    moves: list[tuple[int, int, int, set[int]]], placed: list[int], streams: int
) -> list[list[int]]:
    """Per move, the dependencies it must wait for by event: none that stream order and
    the waits already made imply.  A vector clock per move (per stream, the latest move
    known to come before it) says what is implied; the latest dependencies are taken
    first, since an earlier move can never imply a later one."""
    width = len(placed) and (max(m[0] for m in moves) + 1) * streams
    clocks: list[list[int]] = []
    last: dict[int, int] = {}  # stream index -> its latest move
    needs: list[list[int]] = []
    for op, (node, _, _, deps) in enumerate(moves):
        here = node * streams + placed[op]
        clock = list(clocks[last[here]]) if here in last else [-1] * width
        wait: list[int] = []
        for d in sorted(deps, reverse=True):
            if clock[moves[d][0] * streams + placed[d]] >= d:
                continue
            wait.append(d)
            clock = [max(a, b) for a, b in zip(clock, clocks[d], strict=True)]
        clock[here] = op
        clocks.append(clock)
        last[here] = op
        needs.append(wait)
    return needs


def _joins(moves, placed: list[int], needs: list[list[int]], event_of: dict, events: list):
    """The streams to fork, and the (node, stream, event) of the last moves node 0's first
    stream must join at the end: every stream's, unless it already waited for that move
    directly (a capture must see each stream joined to its origin).  Gives the last moves
    it joins an event where they have none."""
    last = {(moves[op][0], stream): op for op, stream in enumerate(placed)}
    origin = {
        d for op, wait in enumerate(needs) if (moves[op][0], placed[op]) == (0, 0) for d in wait
    }
    forks = tuple(sorted(where for where in last if where != (0, 0)))
    joins = []
    for node, stream in forks:
        op = last[(node, stream)]
        if op in origin:
            continue
        if op not in event_of:
            event_of[op] = events[node]
            events[node] += 1
        joins.append((node, stream, event_of[op]))
    return forks, tuple(joins)


@lru_cache(maxsize=32)
def stream_schedule(plan: Plan, streams: int) -> StreamSchedule:
    """The moves of ``plan`` spread over ``streams`` streams per node (see the module
    docstring)."""
    moves = _dependencies(plan)
    placed = _place(moves, plan.nodes, streams)
    needs = _needed(moves, placed, streams)
    events = [0] * plan.nodes
    event_of: dict[int, int] = {}
    for op in sorted({d for wait in needs for d in wait}):
        node = moves[op][0]
        event_of[op], events[node] = events[node], events[node] + 1
    forks, joins = _joins(moves, placed, needs, event_of, events)
    ops = tuple(
        MoveOp(
            node,
            t,
            index,
            placed[op],
            tuple((moves[d][0], event_of[d]) for d in needs[op]),
            event_of.get(op, -1),
        )
        for op, (node, t, index, _) in enumerate(moves)
    )
    return StreamSchedule(streams, ops, tuple(events), forks, joins)
