"""How a cpu communicator runs a plan it was given: bound to its buffers for a repeated call
(:mod:`ring.host.moves`) or once, on the calling thread or the workers (:mod:`ring.cpu.crew`),
under the call lock; a call that does not complete closes the communicator, so no worker
outlives it.

:class:`Execution` is the part of :class:`~ring.cpu.communicator.CpuCommunicator` that does
this; the communicator checks a call and plans it first.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from .. import nvtx
from ..communicator import Call, CommunicatorClosedError
from ..host import positions
from ..host.moves import Bound
from ..planning.candidates import auto_generation
from ..schedule import AUTO, Plan
from .crew import Crew

__all__ = ["Execution"]


class Execution:
    """The execution of a checked, planned call on a communicator's crew (a mixin of
    :class:`~ring.cpu.communicator.CpuCommunicator`, whose state these are)."""

    nodes: int
    cores: int
    algorithm: str
    inline_bytes: int
    executor: str
    _crew: Crew
    _call_lock: threading.Lock
    _closed: bool
    _ranged: bool
    _call_pushers: dict[str, Callable[[], Any]]
    _bound: dict[object, Bound]
    _trial_bound: dict[tuple, tuple[Bound, Call]]
    _finalizer: weakref.finalize

    def _bind(
        self, call: Call, steps: Plan, executor: str, threads: int, tile: int | None = None
    ) -> Bound | None:
        """The call bound to its buffers (ring.host.moves): on the calling thread where its
        plan can be (see ring.cpu.crew.Crew.bind), else its job on the workers; ``tile``:
        bytes of a tile by slices (None: the machine's default)."""
        ufunc, _, average = call.checked
        buffers = list(call.buffers)
        if threads == 1:
            bound = self._crew.bind(call.op, buffers, ufunc, steps, average, executor, tile)
        else:
            bound = self._crew.bind_workers(
                call.op, buffers, ufunc, steps, average, threads, executor, tile
            )
        if bound is None:
            return None
        # auto's pick stands while its tables stay (ring.auto.generation); others always.
        auto_pick = call.options.get("algorithm", self.algorithm) == AUTO
        return bound._replace(generation=auto_generation() if auto_pick else -1)

    def _guarded(self, name: str, run, *args) -> None:
        """``run(*args)`` as collective ``name``, once the communicator is known open; it
        returns a worker's exception, if any.  Interrupted (Ctrl-C), wherever in this
        block, or failed anywhere: the communicator closes, so no worker outlives it.
        The outer range is pushed and popped directly (a context manager is two Python
        frames more, which at 1 KiB are a good part of a bound call), and only where a tool
        can take it (:data:`ring.nvtx.AVAILABLE`)."""
        with self._call_lock:
            if self._closed:  # a call less than _check_open() on the way through
                self._check_open()
            try:
                if self._ranged:
                    self._call_pushers[name]()
                    try:
                        error = run(*args)
                    finally:
                        nvtx.pop()
                else:
                    error = run(*args)
            except BaseException:
                self._shut_down()
                raise
            if error is not None:
                self._shut_down()
                raise error

    def _check_open(self) -> None:
        if self._closed:
            raise CommunicatorClosedError(f"{self!r} is closed: create a new communicator")

    def threads_for(
        self,
        nbytes: int,
        inline_bytes: int | None = None,
        executor: str | None = None,
        tile: int | None = None,
    ) -> int:
        """How many threads a call of ``nbytes`` per node runs on: 1 (the caller) up to
        ``inline_bytes``; above it, one per node (``executor="nodes"``) or one per slice,
        as many as nodes, cores and whole tiles (of ``tile`` bytes) allow (``"slices"``)."""
        inline_bytes = self.inline_bytes if inline_bytes is None else inline_bytes
        if self.nodes == 1 or nbytes <= inline_bytes:
            return 1
        if (self.executor if executor is None else executor) == "slices":
            tiles = -(-nbytes // (tile or positions.tile_bytes()))  # a slice is whole tiles
            return min(self.nodes, self.cores, tiles)
        return self.nodes

    def _run(self, buffers, ufunc, steps, average, threads, executor, tile=None):
        """Run one plan on ``threads`` threads; a worker's exception is returned."""
        crew = self._crew
        if executor == "slices":
            job = crew.slice_job(buffers, ufunc, steps, average, threads, tile)
            if job is not None:
                return crew.run_slices(job)
        job = crew.job(buffers, ufunc, steps, average)
        if threads == 1:
            crew.run_inline(job)
            return None
        return crew.run(job)

    def _shut_down(self) -> None:
        """Close after a call that did not complete: stop and join every worker."""
        self._closed = True
        self._bound = {}
        self._trial_bound = {}
        self._finalizer.detach()
        self._crew.stop(True)
