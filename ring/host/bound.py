"""A repeated call on the calling thread, bound to its buffers.

A call of at most ``inline_bytes`` per node runs on the calling thread, where at small
sizes its cost is Python's: the buffers' checks, the plan's look-ups and a view per
operation.  When a call repeats on the same buffer objects (a training loop's gradient
buckets, a benchmark's timed calls) none of that changes.  :class:`Bound` keeps the list
of (operation, destination view, source view) that the plan gives for those buffers, and
a call that :meth:`Bound.takes` (the same list of the same objects, each with the dtype,
strides and writeable flag it had, and the same op) runs that list and nothing else.
A bound call holds a weak reference to each buffer, which makes NumPy refuse to resize it
(even with ``refcheck=False``): the views would otherwise point at freed memory.

By slices (:func:`bind`) the list is :func:`ring.host.slices.tile_operations` over every
position, what :func:`ring.host.slices.run_slice` runs on one slice, in the same order.  By
nodes (:func:`bind_steps`) it is what :meth:`ring.cpu.crew.Crew.run_inline` runs, step by
step and node after node (:func:`ring.host.moves.inline_steps`), each node's step inside
its NVTX range, which the profiles read.  Either way the result is bit for bit the unbound
call's.  The views keep the buffers alive until the next call of that collective on other
buffers, or until the communicator closes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from .moves import inline_steps, run_ranged
from .positions import ByPosition
from .slices import apply, tile_operations

__all__ = ["Bound", "bind", "bind_steps"]


class Bound(NamedTuple):
    op: str | None
    algorithm: str  # the one that ran: a call of "auto" is bound to auto's pick
    buffers: tuple
    layouts: tuple  # per buffer: (the buffer, its dtype, its strides) when bound
    ufunc: Any
    # (ring.host.slices.kind, destination, source, divide by N after); by nodes, per step and node
    # (push its NVTX range, its operations)
    program: tuple
    # Applies the program in order (an exception, Ctrl-C too, propagates): by slices
    # ring.host.slices.apply, by nodes ring.host.moves.run_ranged, with their arguments.
    run: Callable[[], None]
    generation: int = 0  # auto's (ring.communicator.auto_generation) when it picked
    # One weak reference per buffer, kept while bound: NumPy refuses to resize an array
    # that has one, so the views above never outlive the memory they point at.
    pins: tuple = ()

    def takes(self, buffers: object, op: str | None) -> bool:
        """Whether a call of ``op`` on ``buffers`` is this bound call again."""
        if op != self.op or type(buffers) is not list or len(buffers) != len(self.buffers):
            return False
        # An array object's size is fixed while views of it exist (resize is refused), so
        # with its dtype and strides (their count is its ndim) unchanged so is its shape.
        # The same dtype object, not an equal one: a dtype set again in place only costs a
        # rebinding.  About 0.15 µs a buffer: each attribute read builds an object.
        # One condition per buffer, and zip without strict (the lengths are equal): 0.1 µs
        # less at N = 2.
        for buf, (mine, dtype, strides) in zip(buffers, self.layouts):  # noqa: B905
            if (
                buf is not mine
                or buf.dtype is not dtype
                or buf.strides != strides
                or not buf.flags.writeable
            ):
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
    run = partial(apply, program, ufunc, len(buffers))
    layouts = _layouts(buffers)
    return Bound(op, algorithm, tuple(buffers), layouts, ufunc, program, run, pins=_pins(buffers))


def bind_steps(op: str | None, buffers: list, ufunc, job, pop) -> Bound:
    """The inline call of a :class:`ring.cpu.crew` job bound to ``buffers``: per step,
    node after node, the push of the node's step range and its operations."""
    program = tuple((push, tuple(ops)) for push, ops in inline_steps(job))
    run = partial(run_ranged, program, ufunc, len(buffers), pop)
    layouts = _layouts(buffers)
    algorithm = job.plan.algorithm
    return Bound(op, algorithm, tuple(buffers), layouts, ufunc, program, run, pins=_pins(buffers))


def _layouts(buffers: list) -> tuple:
    return tuple((b, b.dtype, b.strides) for b in buffers)


def _pins(buffers: list) -> tuple:
    return tuple(weakref.ref(b) for b in buffers)
