"""The CPU backend's ``executor="slices"``: a plan run by position, not by node.

Every node's buffer lives in one address space, and a plan never mixes positions
(:mod:`ring.host.positions`), so the positions can be split between threads instead of the
nodes: each of ``parts`` threads (the caller and ``parts - 1`` of the communicator's
workers) takes one slice of the positions and applies to it, tile by tile, every node's
operations in the plan's order.  A tile of every buffer stays in the core's cache while
all its operations run, so memory sees each input read once and each result written once
(the 2N·S of a hand-written shared-memory reduction), and no thread waits for another
until the call ends.  Each element sees the plan's operations in the plan's order: bit
for bit the result of ``executor="nodes"``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..machine import cache_bytes
from ..ops import divide_by_nodes
from .positions import ByPosition

__all__ = [
    "ACCUMULATE",
    "COPY",
    "SOURCE_FIRST",
    "SliceJob",
    "apply",
    "kind",
    "run_slice",
    "slice_bounds",
    "tile_bytes",
    "tile_elements",
    "tile_operations",
]


def tile_bytes() -> int:
    """Bytes of one tile of a tiled step: a quarter of the per-core L2, so the target
    tile and the source streaming past it stay in it (16 KiB at least)."""
    return max(16 << 10, cache_bytes()[0] // 4)


def tile_elements(dtype: np.dtype) -> int:
    """Elements of ``dtype`` in one tile (:func:`tile_bytes`)."""
    return max(1, tile_bytes() // dtype.itemsize)


class SliceJob(NamedTuple):
    buffers: list
    ufunc: Any
    average: bool
    plan: ByPosition
    bounds: list[tuple[int, int]]  # per part: its positions
    tile: int  # positions per tile
    scratch: list  # per part: each node's scratch slots for one tile (or None)
    finished: Any  # itertools.count: workers done with this call
    workers: int  # parts run by workers (all but the caller's)


def slice_bounds(length: int, parts: int, tile: int) -> list[tuple[int, int]]:
    """``parts`` slices of ``[0, length)``, cut at whole tiles so no tile is split."""
    tiles = -(-length // tile)
    cuts = [min(length, tile * (tiles * p // parts)) for p in range(parts + 1)]
    return [(cuts[p], cuts[p + 1]) for p in range(parts)]


def scratch_slots(parts: int, nodes: int, tile: int, dtype: np.dtype) -> list:
    """Per part, one tile of scratch per node."""
    return [[np.empty(tile, dtype) for _ in range(nodes)] for _ in range(parts)]


def tile_operations(
    plan: ByPosition, lo: int, hi: int, tile: int, buffers: list, slots, average: bool
):
    """Per tile of positions ``[lo, hi)``, in the plan's order: its operations on views of
    ``buffers`` (and of ``slots``, each node's scratch tile, where the plan uses scratch) as
    (:func:`kind`, destination, source, divide by N after)."""
    for start, stop, ops in plan.segments:
        a, b = max(start, lo), min(stop, hi)
        for t0 in range(a, b, tile):
            t1 = min(t0 + tile, b)
            views = [buffer[t0:t1] for buffer in buffers]
            own = [slot[: t1 - t0] for slot in slots] if slots else views
            yield [
                (
                    kind(accumulate, first),
                    own[node] if to_scratch else views[node],
                    own[node] if from_scratch else views[peer],
                    accumulate and completes and average,
                )
                for node, peer, accumulate, completes, from_scratch, to_scratch, first in ops
            ]


# What an operation does with its source (the first field of an operation tuple).
COPY, ACCUMULATE, SOURCE_FIRST = 0, 1, 2


def kind(accumulate: bool, source_first: bool) -> int:
    """An operation's :data:`COPY`, :data:`ACCUMULATE` (``dst = dst op src``) or
    :data:`SOURCE_FIRST` (``dst = src op dst``, see ``ring.schedule.steps.Move``)."""
    if not accumulate:
        return COPY
    return SOURCE_FIRST if source_first else ACCUMULATE


def apply(operations, ufunc, nodes: int) -> None:
    """Run operations of :func:`tile_operations` in order."""
    for how, dst, src, divide in operations:
        if how == ACCUMULATE:
            ufunc(dst, src, out=dst)
        elif how:
            ufunc(src, dst, out=dst)
        else:
            dst[...] = src
            continue
        if divide:
            divide_by_nodes(dst, nodes)


def run_slice(job: SliceJob, part: int, stopped) -> None:
    """Apply the plan to ``part``'s positions; ``stopped()`` is asked before each tile, and
    when it says another thread failed the slice raises ``stopped.error``."""
    lo, hi = job.bounds[part]
    slots = job.scratch[part] if job.plan.uses_scratch else None
    tiles = tile_operations(job.plan, lo, hi, job.tile, job.buffers, slots, job.average)
    for operations in tiles:
        stopped()
        apply(operations, job.ufunc, len(job.buffers))
