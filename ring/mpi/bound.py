"""A repeated MPI call bound to its buffer: what stays the same is not looked up again.

A small allreduce costs about its one exchange (:mod:`ring.mpi.exchange`), and the Python
around it: the form's key (built from the buffer's dtype, length, flags and the call's
options), the kept form's and program's look-ups, the buffer copied into the exchange's
slot through a new memoryview.  When a call repeats on the same buffer object with the
same op and the ring's own options (a training loop's gradient bucket, a benchmark's
timed calls), none of that changes.  :class:`Bound` keeps one function made for the call,
holding its form's row, its compiled program, the exchange's persistent requests and a
byte view of its buffer: a call it takes starts and waits for the exchange, makes the same
check of every rank's row (:func:`ring.mpi.agree.check_table`: a rank whose call differs
still raises the same error on every rank) and runs the program, nothing else.  (With
no NVTX tool attached, :mod:`ring.nvtx`, a gathered program is built as one list of
moves, without the step ranges nobody would record: ``MpiRing._host_program``.)

What that leaves of a small call, measured against ``MPI_Allreduce``:
docs/notes/mpi-bound-call.md.

Only NumPy calls the form cache keeps (:func:`ring.mpi.agree.form_key`) are bound, and
only calls without per-call options: a call with options, or on another buffer, takes the
full path (and binds itself in turn).  The bound views keep the buffer alive until the
next call of that collective on another buffer, or until the ring closes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .. import nvtx
from .agree import SLOT_DATA, check_table

__all__ = ["Bound", "bind"]


class Bound(NamedTuple):
    """A bound call: ``call(buffers, op)`` runs it and returns True when the call is this
    one again, else returns False having done nothing (:func:`bind`); ``held`` is the
    same for a caller that holds the ring's lock and has pushed the call's outer range
    already when it passes ``outer=False`` (a trial of ``auto``)."""

    buf: np.ndarray
    call: Callable[[object, str | None], bool]
    held: Callable[..., bool]  # (buffers, op, outer=True): False, no outer range


def bind(ring, name: str, buf, op: str | None, settings: tuple, form, run) -> Bound:
    """A call of collective ``name`` and ``form`` with ``op`` on ``buf`` bound, on ``ring``
    (a :class:`ring.mpi.MpiRing` whose options were ``settings``); ``run``: its compiled
    program, ready to run (None: nothing moves)."""
    return Bound(buf, *_call(ring, name, buf, op, settings, form, run))


def _call(ring, name: str, buf, op, settings: tuple, form, run):
    """The bound call, ``call`` (which takes the ring's lock) and ``held`` (run under it).
    It takes the call when it is this one again, on ``ring``, under its lock: the same
    buffer object, with the dtype object and strides it had (while the bound views exist
    it cannot be resized, so its length is the same) and still writeable, the same op, the
    ring's same option objects, the ring open.  Then: the outer range; the call's row in the
    pre-flight slot unless the slot holds it already, and a gathered call's buffer with it;
    the exchange and the check of every rank's row (any difference, or a local error on
    some rank, raises the same error on every rank through
    :func:`ring.mpi.agree.check_table`, before anything moves); the program.  A Ctrl-C in
    the exchange, or a failure once data moves, aborts the job (``ring.abort``), as a call
    in full does.  Written out rather than through the ring's methods (``call`` adds only
    the lock to ``held``): for a small call each layer of Python is a visible share of the
    call, and each rank's Python delays its peers' exchange as well as its own."""
    row, dtype, strides = form.row, buf.dtype, buf.strides
    segment, algorithm, group = settings
    comm, rows, lock = ring.comm, ring.rows, ring.call_lock
    # Each peer's row, read as bytes one by one: an N-row copy costs more at N = 2.
    peers = tuple(memoryview(rows[j]) for j in range(ring.nodes) if j != ring.rank)
    exchange = ring.exchange
    sent = SLOT_DATA + (buf.nbytes if form.gathered else 0)
    start, wait, requests = exchange.starter(sent)
    generation = exchange.generation
    # The ring keeps this function: a strong reference back would be a cycle, and a ring
    # dropped without close() would keep its bound buffers until the cyclic collector runs.
    ring_ref = weakref.ref(ring)
    push, pop, ranged = ring.outer_ranges[name], nvtx.pop, nvtx.AVAILABLE
    place = data = None
    if form.gathered:
        place = ring.slot_view[SLOT_DATA : SLOT_DATA + buf.nbytes]
        data = memoryview(buf).cast("B")

    def call(buffers: object, given_op: str | None) -> bool:
        with lock:
            return held(buffers, given_op)

    def held(buffers: object, given_op: str | None, outer: bool = True) -> bool:
        if type(buffers) is not list or len(buffers) != 1 or buffers[0] is not buf:
            return False
        if given_op != op or buf.dtype is not dtype or buf.strides != strides:
            return False
        ring = ring_ref()
        if ring is None or ring.algorithm is not algorithm or ring.segment_bytes is not segment:
            return False
        if ring.group_size is not group or not buf.flags.writeable:
            return False
        if exchange.generation != generation:  # its requests were freed, or the ring closed
            return False
        pushed = ranged and outer
        if pushed:
            push()
        try:
            if ring.slot_row is not row:
                ring.put_row(row)
            if place is not None:
                place[:] = data
            try:
                if requests:
                    start(requests)
                    wait(requests)
                for peer in peers:
                    if peer.tobytes() != row:
                        check_table(comm, rows, form, None)
            except Exception:
                raise  # raised alike on every rank, before any data moves
            except BaseException:  # noqa: BLE001 - Ctrl-C: the peers have the table
                ring.abort(name)
            try:
                if run is not None:
                    run()
            except BaseException:  # noqa: BLE001 - the peers are mid-collective
                ring.abort(name)
        finally:
            if pushed:
                pop()
        return True

    return call, held
