"""One rank's steps of any algorithm's plan, compiled once into MPI messages and ufunc calls.

A step's moves that read another rank's buffer are messages: that rank lists the same
range in its ``sends`` at the same step, in the order this rank applies its moves, so the
two sides pair one for one (MPI keeps messages between two ranks in order).  Every send
and receive of a step is posted at once (``Isend``/``Irecv``, then ``Waitall``), so no
order of blocking calls can deadlock, whatever the algorithm; a step with exactly one
message each way uses one ``Sendrecv``.  A received range is accumulated from a landing
area, or, when it is copied and nothing else in the step reads this rank's memory, lands
in place.  Moves that read this rank's own buffer or scratch need no message.  Empty
ranges send nothing on either side (both sides know the range).  After the messages the
moves are applied in order, which is all the plan asks (see :mod:`ring.schedule.steps`).

Small ``direct`` and ``reduce-broadcast`` calls run on the pre-flight exchange
(:func:`compile_gathered`).

The plain ring is compiled by :func:`compile_ring`: one ``Sendrecv`` per step, or per
segment of ``segment_bytes`` in reduce-scatter, so the landing segment is still in cache
when the reduction reads it.

Compiling is done once per (call form, buffer), and kept (:class:`Programs`):
every slice, ``[range, MPI.BYTE]`` message spec, peer and NVTX pusher is made then, so a
repeated call only posts messages and runs ufuncs: at small sizes the Python around the
messages, not the messages, is most of a call.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from .. import nvtx
from ..schedule import COLLECTIVES, plan, plan_for

__all__ = [
    "Programs",
    "StepBuffers",
    "apply_moves",
    "compile_gathered",
    "compile_plan",
    "compile_ring",
    "form_plan",
    "landing_elements",
    "moves_run",
    "ring_cuts",
    "run_gathered",
    "run_steps",
    "scratch_elements",
    "weakrefable",
]

# How a round's messages go: one Sendrecv, all posted then waited for, or none.
SENDRECV, POSTED, LOCAL = 0, 1, 2


class StepBuffers(NamedTuple):
    """What a rank's steps read and write: its buffer, the algorithm's scratch (moves
    ``to_scratch`` / ``from_scratch``) and the landing area of received ranges."""

    buf: Any
    scratch: Any
    landing: Any


# One move applied after a round's messages: accumulate (``target = first op data``, with
# the call's ufunc; ``first`` is ``target`` but where a copy into it is folded in, or where
# the arriving range is the left operand, ``Move.source_first``: then ``data`` is
# ``target``) or copy ``data`` into ``target`` (``data`` None: it landed in place), then,
# if ``completes``, the op's last touch on ``target`` (avg's division).
Apply = tuple[bool, Any, Any, Any, bool]
# One round: how its messages go, the sends and receives ([spec, peer] pairs; one pair
# each for SENDRECV), then the moves it applies.
Round = tuple[int, Any, Any, tuple[Apply, ...]]
# One step: its NVTX pusher and its rounds.
Compiled = tuple[Callable[[], Any], tuple[Round, ...]]


def form_plan(form, nodes: int, buf):
    """The plan of a call of ``form`` (:class:`ring.mpi.agree.CallForm`) on ``buf``, with
    the form's options."""
    options = {"segment_bytes": form.segment, "group_size": form.group}
    itemsize = buf.dtype.itemsize
    return plan_for(form.name, nodes, buf.shape[0], itemsize, form.algorithm, options)


def _is_message(move, rank: int) -> bool:
    return move.peer != rank and not move.from_scratch


def _reads_own(step, rank: int) -> bool:
    return any(not _is_message(m, rank) for m in step.moves)


def landing_elements(steps: tuple, rank: int) -> int:
    """The most elements one of ``steps`` receives into the landing area."""
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


def _round(byte, sends: list, receives: list, applies: list) -> Round:
    sends = [([data, byte], peer) for data, peer in sends]
    receives = [([place, byte], peer) for place, peer in receives]
    if len(sends) == 1 and len(receives) == 1:
        return SENDRECV, sends[0], receives[0], tuple(applies)
    kind = POSTED if sends or receives else LOCAL
    return kind, tuple(sends), tuple(receives), tuple(applies)


def _compile_step(step, rank: int, memory: StepBuffers, byte) -> tuple[Round, ...]:
    buf, scratch = memory.buf, memory.scratch
    if not step.moves and not step.sends:
        return ()  # an idle step
    local = _reads_own(step, rank)
    receives, applies = [], []
    offset = 0
    for m in step.moves:
        a, b = m.src
        if a == b:
            continue  # an empty range: nothing travels, nothing to apply
        lo, hi = m.dst
        target = (scratch if m.to_scratch else buf)[lo:hi]
        data: Any
        if not _is_message(m, rank):
            data = (scratch if m.from_scratch else buf)[a:b]
        elif m.accumulate or local:
            data = memory.landing[offset : offset + b - a]
            offset += b - a
            receives.append((data, m.peer))
        else:
            receives.append((target, m.peer))
            data = None  # copied in place by the receive
        completes = m.completes and not m.to_scratch
        if m.accumulate and m.source_first:
            applies.append((True, data, target, target, completes))
        else:
            applies.append((m.accumulate, target, target, data, completes))
    sends = [(buf[a:b], s.peer) for s in step.sends for a, b in (s.src,) if b > a]
    return (_round(byte, sends, receives, applies),)


def compile_plan(steps: tuple, rank: int, memory: StepBuffers, byte, pushers) -> tuple:
    """Any algorithm's steps on this rank, compiled (see the module docstring)."""
    return tuple(
        (push, _compile_step(step, rank, memory, byte))
        for push, step in zip(pushers, steps, strict=True)
    )


def compile_gathered(steps, rank: int, buf, slots, pushers) -> tuple:
    """A plan of ring.mpi.agree.rides_preflight (``direct``, a ``reduce-broadcast``
    allreduce) when every rank's buffer came with the pre-flight exchange (``slots[j]``:
    rank j's input): its moves read the peers' inputs from there instead of messages, and
    a range it would copy from the rank that completed it is completed here instead, by
    that rank's own moves in its order, so the result is the one the messages would bring.
    Two calls less than the plan's steps, which at 1 KiB is most of the call.  Per step:
    its NVTX pusher and its moves (:func:`run_gathered` runs them)."""
    completing: dict[tuple[int, int], list] = {}
    for node in range(steps.nodes):
        for step in steps.node_steps(node):
            for m in step.moves:
                if m.accumulate:
                    completing.setdefault(m.dst, [(node, m)]).append((node, m))
    compiled = []
    for push, step in zip(pushers, steps.node_steps(rank), strict=True):
        applies: list[Apply] = []
        for m in step.moves:
            a, b = m.src
            if a == b:
                continue
            target = buf[a:b]
            if m.accumulate:
                theirs = slots[m.peer][a:b]
                first, data = (theirs, target) if m.source_first else (target, theirs)
                applies.append((True, first, target, data, m.completes))
                continue
            # A copy: of the owner's input (all_gather), or of what the owner completed,
            # starting from its input (folded into its first accumulation: the same sum).
            (owner, _), *moves = completing.get(m.dst, [(m.peer, m)])
            first = slots[owner][a:b]
            if not moves:
                applies.append((False, target, target, first, False))
            for _, x in moves:
                theirs = slots[x.peer][a:b]
                if x.source_first:
                    applies.append((True, theirs, target, first, x.completes))
                else:
                    applies.append((True, first, target, theirs, x.completes))
                first = target
        compiled.append((push, tuple(applies)))
    return tuple(compiled)


def run_gathered(program: tuple, ufunc, finish: Callable[[Any], None] | None) -> None:
    """Run a :func:`compile_gathered` program: per step, its range and its moves (no
    messages: the inputs came with the pre-flight exchange)."""
    pop = nvtx.pop
    for push, applies in program:
        push()
        try:
            apply_moves(applies, ufunc, finish)
        finally:
            pop()


def apply_moves(applies: tuple, ufunc, finish: Callable[[Any], None] | None) -> None:
    """A round's moves, in order (:data:`Apply`)."""
    for accumulate, first, target, data, completes in applies:
        if data is not None:
            if accumulate:
                ufunc(first, data, out=target)
            else:
                target[...] = data
        if completes and finish is not None:
            finish(target)


def moves_run(applies: tuple, ufunc, finish: Callable[[Any], None] | None) -> partial:
    """``applies`` ready to run: one accumulation with nothing after it (a gathered
    allreduce at N = 2) is its ufunc call alone, the loop of :func:`apply_moves` left out:
    for a small call that loop costs as much as the accumulation itself."""
    if len(applies) == 1:
        ((accumulate, first, target, data, completes),) = applies
        if accumulate and data is not None and not (completes and finish is not None):
            return partial(ufunc, first, data, target)  # out by position: no keyword parsing
    return partial(apply_moves, applies, ufunc, finish)


def ring_cuts(largest: int, itemsize: int, segment_bytes: int) -> tuple[int, int]:
    """(segment elements, segments per range) of the plain ring's reduce-scatter, whose
    longest range is ``largest`` elements (0 ``segment_bytes``: whole ranges)."""
    seg = largest
    if segment_bytes:
        seg = min(largest, max(1, segment_bytes // itemsize))
    return seg, -(-largest // seg)


def compile_ring(steps: tuple, memory: StepBuffers, byte, cuts, pushers) -> tuple:
    """The plain ring's steps: each one move from the left neighbour and one send to the
    right one.  ``cuts`` = (segment elements, segments per range): every rank and step cuts
    ranges into the same number of segments, so sender and receiver pair their messages
    one for one even when range lengths differ."""
    buf, landing = memory.buf, memory.landing
    seg, segments = cuts
    compiled = []
    for push, step in zip(pushers, steps, strict=True):
        ((left, (a, b), _, accumulate, completes, *_),) = step.moves
        ((right, (sa, sb)),) = step.sends
        rounds = []
        if not accumulate:
            rounds.append(_round(byte, [(buf[sa:sb], right)], [(buf[a:b], left)], []))
        else:
            for k in range(segments):
                lo, hi = min(a + k * seg, b), min(a + (k + 1) * seg, b)
                slo, shi = min(sa + k * seg, sb), min(sa + (k + 1) * seg, sb)
                incoming = landing[: hi - lo]
                mine = buf[lo:hi]
                applies = [(True, mine, mine, incoming, False)] if hi > lo else []
                rounds.append(_round(byte, [(buf[slo:shi], right)], [(incoming, left)], applies))
        if completes:
            kind, sends, receives, last = rounds[-1]
            rounds[-1] = kind, sends, receives, (*last, (False, buf[a:b], buf[a:b], None, True))
        compiled.append((push, tuple(rounds)))
    return tuple(compiled)


def run_steps(
    comm, program: tuple, ufunc, synchronize, finish: Callable[[Any], None] | None
) -> None:
    """Run a compiled program: each round's messages, then its moves in order.

    ``synchronize`` (device buffers) runs before every round: MPI reads and writes device
    memory outside the stream, so the kernels of the round before must have finished."""
    sendrecv, irecv, isend = comm.Sendrecv, comm.Irecv, comm.Isend
    pop = nvtx.pop
    for push, rounds in program:
        push()
        try:
            for kind, sends, receives, applies in rounds:
                if synchronize is not None:
                    synchronize()
                if kind == SENDRECV:
                    sendrecv(sends[0], sends[1], 0, receives[0], receives[1], 0)
                elif kind == POSTED:
                    requests = [irecv(spec, peer, 0) for spec, peer in receives]
                    requests += [isend(spec, peer, 0) for spec, peer in sends]
                    requests[0].Waitall(requests)
                apply_moves(applies, ufunc, finish)
        finally:
            pop()


# Kept programs: calls repeat a few (plan, buffer) pairs; a sweep moves on.
_KEPT = 64


def weakrefable(obj) -> bool:
    try:
        weakref.ref(obj)
    except TypeError:
        return False
    return True


class Programs:
    """One ring's compiled programs, per (call form, buffer), and the preallocated areas
    they use: ``landing`` for received ranges, ``algorithm`` for the plan's own scratch.
    A kept program's views keep its buffer alive until the program is dropped (more than
    ``_KEPT`` kept, a larger area needed, or the ring closed); ``slots`` are the data parts
    of the pre-flight exchange's slots (small ``direct`` calls read them)."""

    def __init__(self, rank: int, nodes: int, byte, slots):
        self.rank, self.nodes, self._byte, self._slots = rank, nodes, byte, slots
        self._kept: dict = {}
        self._areas: dict = {}
        # Per collective, the NVTX range pusher of each of this rank's ring steps.
        self._ring_pushers = {
            name: self._pushers(plan(name, nodes, 0).node_steps(rank)) for name in COLLECTIVES
        }

    def clear(self) -> None:
        self._kept, self._areas = {}, {}

    def get(self, form, buf, cupy) -> tuple:
        """The compiled steps of a call of ``form`` on ``buf``, made on its first call."""
        key = (id(form), id(buf))  # ids: hashing the form costs more than the lookup
        kept = self._kept.get(key)
        if kept is not None and kept[0] is form and kept[1]() is buf:
            return kept[2]
        if form.gathered:
            program = self._gathered(form, buf)
        elif form.algorithm == "ring" or self._one_group(form):
            program = self._ring(form, buf, cupy)
        else:
            program = self._plan(form, buf, cupy)
        if weakrefable(buf):
            if len(self._kept) >= _KEPT:
                self._kept.clear()
            self._kept[key] = (form, weakref.ref(buf), program)
        return program

    def _one_group(self, form) -> bool:
        """``hierarchical`` with every rank in one group (one host): its plan moves what the
        ring's moves, step for step (tests/test_schedule.py), so it runs as the ring does,
        under its own step names."""
        return form.algorithm == "hierarchical" and form.group == self.nodes

    def _ring(self, form, buf, cupy) -> tuple:
        steps = plan(form.name, self.nodes, buf.shape[0])
        cuts = ring_cuts(steps.scratch_elements, buf.dtype.itemsize, form.segment)
        landing = None if form.op is None else self._area(buf, cuts[0] * buf.dtype.itemsize, cupy)
        memory = StepBuffers(buf, None, landing)
        pushers = self._ring_pushers[form.name]
        if form.algorithm != "ring":
            options = {"group_size": form.group}
            own = plan_for(form.name, self.nodes, buf.shape[0], 1, form.algorithm, options)
            pushers = self._pushers(own.node_steps(self.rank))
        mine = steps.node_steps(self.rank)
        return compile_ring(mine, memory, self._byte, cuts, pushers)

    def _gathered(self, form, buf) -> tuple:
        slots = self._slots[:, : buf.nbytes].view(buf.dtype)
        itemsize = buf.dtype.itemsize
        steps = plan_for(form.name, self.nodes, buf.shape[0], itemsize, form.algorithm, {})
        pushers = self._pushers(steps.node_steps(self.rank))
        return compile_gathered(steps, self.rank, buf, slots, pushers)

    def _plan(self, form, buf, cupy) -> tuple:
        steps = form_plan(form, self.nodes, buf)
        mine = steps.node_steps(self.rank)
        landing = landing_elements(mine, self.rank)
        scratch = scratch_elements(mine)
        itemsize = buf.dtype.itemsize
        memory = StepBuffers(
            buf,
            self._area(buf, scratch * itemsize, cupy, "algorithm") if scratch else None,
            self._area(buf, landing * itemsize, cupy) if landing else None,
        )
        return compile_plan(mine, self.rank, memory, self._byte, self._pushers(mine))

    def _pushers(self, steps: tuple) -> tuple:
        return tuple(nvtx.pusher(f"{s.name} rank {self.rank}") for s in steps)

    def _area(self, buf, nbytes: int, cupy=None, role: str = "landing"):
        """A preallocated area of ``nbytes`` on the memory that holds ``buf``."""
        key = (role, "NumPy") if cupy is None else (role, "CuPy", buf.device.id)
        area = self._areas.get(key)
        if area is None or area.nbytes < nbytes:
            area = (np if cupy is None else cupy).empty(nbytes, dtype=np.uint8)
            self._areas[key] = area
            # Compiled programs hold views of the old area: drop them with it.
            self._kept = {}
        return area[:nbytes].view(buf.dtype)
