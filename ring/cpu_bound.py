"""A repeated sliced call on the calling thread, bound to its buffers.

A call of at most ``inline_bytes`` per node runs on the calling thread, where at small
sizes its cost is Python's: the buffers' checks, the plan's look-ups and a view per
operation.  When a call repeats on the same buffer objects (a training loop's gradient
buckets, a benchmark's timed calls) none of that changes.  :class:`Bound` keeps the flat
list of (operation, destination view, source view) that the plan read by position
(:mod:`ring.by_position`) gives for those buffers, tile by tile, and a call that
:meth:`Bound.takes` (the same list of the same objects, each with the shape, dtype,
strides and writeable flag it had, and the same op) runs that list and nothing else.

The list is :func:`ring.cpu_slices.tile_operations` over every position, what
:func:`ring.cpu_slices.run_slice` runs on one slice, in the same order: bit for bit the
result of the unbound call.  Only ``executor="slices"``
binds: the node executor's inline path marks every node's step with an NVTX range, which
the profiles read.  The views keep the buffers alive until the next call of that
collective on other buffers, or until the communicator closes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .by_position import ByPosition
from .cpu_slices import apply, tile_operations

__all__ = ["Bound", "bind", "run_bound"]


class Bound(NamedTuple):
    op: str | None
    algorithm: str  # the one that ran: a call of "auto" is bound to auto's pick
    buffers: tuple
    layouts: tuple  # per buffer: (the buffer, its dtype, its strides) when bound
    ufunc: Any
    program: tuple  # (accumulate, destination, source, divide by N after)

    def takes(self, buffers: object, op: str | None) -> bool:
        """Whether a call of ``op`` on ``buffers`` is this bound call again."""
        if op != self.op or type(buffers) is not list or len(buffers) != len(self.buffers):
            return False
        # An array object's size is fixed while views of it exist (resize is refused), so
        # with its dtype and strides (their count is its ndim) unchanged so is its shape.
        # The same dtype object, not an equal one: a dtype set again in place only costs a
        # rebinding.  About 0.15 µs a buffer: each attribute read builds an object.
        for buf, (mine, dtype, strides) in zip(buffers, self.layouts, strict=True):
            if buf is not mine or buf.dtype is not dtype or buf.strides != strides:
                return False
            if not buf.flags.writeable:
                return False
        return True


def bind(
    op: str | None,
    algorithm: str,
    buffers: list,
    ufunc,
    average: bool,
    positions: ByPosition,
    tile: int,
) -> Bound:
    """The operations of ``positions`` on ``buffers``, tile by tile, as views."""
    length = buffers[0].shape[0]
    scratch = []
    if positions.uses_scratch:
        scratch = [np.empty(min(tile, length), buffers[0].dtype) for _ in buffers]
    tiles = tile_operations(positions, 0, length, tile, buffers, scratch, average)
    program = tuple(operation for operations in tiles for operation in operations)
    layouts = tuple((b, b.dtype, b.strides) for b in buffers)
    return Bound(op, algorithm, tuple(buffers), layouts, ufunc, program)


def run_bound(bound: Bound) -> None:
    """Apply a bound call's operations in order (an exception, Ctrl-C too, propagates)."""
    apply(bound.program, bound.ufunc, len(bound.buffers))
