"""One rank's steps of any algorithm's plan, executed with MPI point-to-point messages.

A step's moves that read another rank's buffer are messages: that rank lists the same
range in its ``sends`` at the same step, in the order this rank applies its moves, so the
two sides pair one for one (MPI keeps messages between two ranks in order).  Every send
and receive of a step is posted at once (``Isend``/``Irecv``, then ``Waitall``), so no
order of blocking calls can deadlock, whatever the algorithm; a step with exactly one
message each way uses one ``Sendrecv``.  A received range is accumulated from a landing
area, or, when it is copied and nothing else in the step reads this rank's memory, lands
in place.  Moves that read this rank's own buffer or scratch need no message.  Empty
ranges send nothing on either side (both sides know the range).  After the messages the
moves are applied in order, which is all the plan asks (see :mod:`ring.schedule_core`).

The plain ring has its own loop (:func:`run_ring_steps`): one ``Sendrecv`` per step, or
per segment of ``segment_bytes`` in reduce-scatter, so the landing segment is still in
cache when the reduction reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import nvtx_ranges

__all__ = ["StepBuffers", "landing_elements", "run_ring_steps", "run_step", "scratch_elements"]


class StepBuffers:
    """What a rank's steps read and write: its buffer, the algorithm's scratch (moves
    ``to_scratch`` / ``from_scratch``) and the landing area of received ranges."""

    __slots__ = ("buf", "landing", "scratch")

    def __init__(self, buf, scratch, landing):
        self.buf = buf
        self.scratch = scratch
        self.landing = landing


def _is_message(move, rank: int) -> bool:
    return move.peer != rank and not move.from_scratch


def landing_elements(steps: tuple, rank: int) -> int:
    """The most elements one of ``steps`` receives into the landing area (see
    :func:`run_step`)."""
    most = 0
    for step in steps:
        local = _reads_own(step, rank)
        total = sum(
            m.src[1] - m.src[0]
            for m in step.moves
            if _is_message(m, rank) and (m.accumulate or local)
        )
        most = max(most, total)
    return most


def scratch_elements(steps: tuple) -> int:
    """How much of the algorithm's scratch ``steps`` touch."""
    return max(
        (
            max(m.dst[1] if m.to_scratch else 0, m.src[1] if m.from_scratch else 0)
            for step in steps
            for m in step.moves
        ),
        default=0,
    )


def _reads_own(step, rank: int) -> bool:
    return any(not _is_message(m, rank) for m in step.moves)


def run_step(
    comm,
    byte,
    rank: int,
    step,
    memory: StepBuffers,
    ufunc,
    finish: Callable[[Any], None] | None,
) -> None:
    """Exchange ``step``'s messages, then apply its moves in order."""
    buf, scratch = memory.buf, memory.scratch
    moves, sends = step.moves, step.sends
    if not moves and not sends:
        return  # an idle step
    local = _reads_own(step, rank)
    landed: list[Any] = []
    receives = []
    offset = 0
    for m in moves:
        a, b = m.src
        if not _is_message(m, rank) or a == b:
            landed.append(None)
            continue
        if m.accumulate or local:
            place = memory.landing[offset : offset + b - a]
            offset += b - a
        else:
            place = _target(m, buf, scratch)
        landed.append(place)
        receives.append((place, m.peer))
    outgoing = [(buf[a:b], s.peer) for s in sends for a, b in (s.src,) if b > a]
    _exchange(comm, byte, outgoing, receives)
    for m, data in zip(moves, landed, strict=True):
        a, b = m.src
        if a == b:
            continue
        target = _target(m, buf, scratch)
        if data is None:
            data = (scratch if m.from_scratch else buf)[a:b]
        elif data is target:
            data = None  # copied in place by the receive
        if data is not None:
            if m.accumulate:
                ufunc(target, data, out=target)
            else:
                target[...] = data
        if finish is not None and m.completes and not m.to_scratch:
            finish(target)


def _target(move, buf, scratch):
    lo, hi = move.dst
    return (scratch if move.to_scratch else buf)[lo:hi]


def _exchange(comm, byte, outgoing: Sequence, receives: Sequence) -> None:
    if len(outgoing) == 1 and len(receives) == 1:
        (data, right), (place, left) = outgoing[0], receives[0]
        comm.Sendrecv([data, byte], right, 0, [place, byte], left, 0)
        return
    requests = [comm.Irecv([place, byte], peer, 0) for place, peer in receives]
    requests += [comm.Isend([data, byte], peer, 0) for data, peer in outgoing]
    if requests:
        requests[0].Waitall(requests)


def run_ring_steps(
    comm, byte, steps, memory: StepBuffers, ufunc, cuts, synchronize, finish, pushers
):
    """The plain ring's steps: each one move from the left neighbour and one send to the
    right one.  ``cuts`` = (segment elements, segments per range): every rank and step cuts
    ranges into the same number of segments, so sender and receiver pair their messages
    one for one even when range lengths differ."""
    buf, landing = memory.buf, memory.landing
    seg, segments = cuts
    sendrecv = comm.Sendrecv
    pop = nvtx_ranges.pop
    for push, step in zip(pushers, steps, strict=True):
        ((left, (a, b), _, accumulate, completes, _, _),) = step.moves
        ((right, (sa, sb)),) = step.sends
        push()
        try:
            if synchronize is not None:
                synchronize()
            if not accumulate:
                sendrecv([buf[sa:sb], byte], right, 0, [buf[a:b], byte], left, 0)
            else:
                for k in range(segments):
                    lo, hi = min(a + k * seg, b), min(a + (k + 1) * seg, b)
                    slo, shi = min(sa + k * seg, sb), min(sa + (k + 1) * seg, sb)
                    if synchronize is not None and k:
                        synchronize()  # the previous reduction still reads the landing area
                    incoming = landing[: hi - lo]
                    sendrecv([buf[slo:shi], byte], right, 0, [incoming, byte], left, 0)
                    if hi > lo:
                        mine = buf[lo:hi]
                        ufunc(mine, incoming, out=mine)
            if finish is not None and completes:
                finish(buf[a:b])
        finally:
            pop()
