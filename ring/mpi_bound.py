"""A repeated MPI call bound to its buffer: what stays the same is not looked up again.

A small allreduce costs about its pre-flight ``Allgather``, and the Python around it: the
form's key (built from the buffer's dtype, length, flags and the call's options), the
kept form's and program's look-ups, the buffer copied into the exchange's slot through a
new memoryview.  When a call repeats on the same buffer object with the same op and the
ring's own options (a training loop's gradient bucket, a benchmark's timed calls), none of
that changes.  :class:`Bound` keeps the call's form, its compiled program, its ufunc and a
byte view of its buffer, and a call that :meth:`Bound.takes` runs the exchange, the same
check of every rank's row (:func:`ring.mpi_agree.check_table`: a rank whose call differs
still raises the same error on every rank) and the program, nothing else.

Only NumPy calls the form cache keeps (:func:`ring.mpi_agree.form_key`) are bound, and
only calls without per-call options: a call with options, or on another buffer, takes the
full path (and binds itself in turn).  The bound views keep the buffer alive until the
next call of that collective on another buffer, or until the ring closes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .mpi_agree import SLOT_DATA

__all__ = ["Bound", "bind"]


class Bound(NamedTuple):
    buf: np.ndarray
    dtype: np.dtype
    strides: tuple
    op: str | None
    settings: tuple  # (segment_bytes, algorithm, group_size): the ring's, when bound
    form: Any  # ring.mpi_agree.CallForm
    run: Any  # runs the compiled program (ring.mpi_steps); None: nothing moves (N = 1)
    slot_data: Any  # (slot's data view, the buffer's bytes) when it rides the exchange

    def takes(self, buffers: object, op: str | None, ring) -> bool:
        """Whether a call of ``op`` on ``buffers`` is this bound call again, on ``ring``
        (whose options are the call's): the same buffer object, with the dtype object and
        strides it had (while the bound views exist it cannot be resized, so its length is
        the same) and still writeable, the same op, and the ring's same option objects."""
        if type(buffers) is not list or len(buffers) != 1 or op != self.op:
            return False
        buf = buffers[0]
        if buf is not self.buf or buf.dtype is not self.dtype or buf.strides != self.strides:
            return False
        segment, algorithm, group = self.settings
        if ring.algorithm is not algorithm or ring.segment_bytes is not segment:
            return False
        return ring.group_size is group and bool(buf.flags.writeable)


def bind(buf, op, settings: tuple, form, run, slot_view) -> Bound:
    """A call of ``form`` on ``buf`` bound; ``slot_view``: this rank's pre-flight slot
    (bytes), whose data part a gathered call fills with the buffer."""

    slot_data = None
    if form.gathered:
        size = buf.nbytes
        slot_data = (slot_view[SLOT_DATA : SLOT_DATA + size], memoryview(buf).cast("B"))
    return Bound(buf, buf.dtype, buf.strides, op, settings, form, run, slot_data)
