"""Calls started with ``async_op=True``: ``ring.allreduce(buffers, async_op=True)`` returns a
:class:`Work` at once and the call runs on a thread of its backend's own, as
``torch.distributed``'s ``async_op=True`` returns a handle to wait on.

A call is checked in full before it is queued (bad input raises in the caller, nothing
touched); the caller must then leave its buffers alone until :meth:`Work.wait` returns.
Each backend has one queue and one thread, so calls run in the order they were made, and
a later call of the same backend without ``async_op`` waits its turn behind them: the
order every MPI rank must keep is the program's.  A call that fails raises from
:meth:`Work.wait`; a Ctrl-C in the caller interrupts the wait, not the call, which
completes (its communicator's own rules hold: a failed call closes it).

The GPU backend queues an ``async_op`` call on its devices' streams instead of a thread and
returns a :class:`Work` of its own (``ring.gpu.caller.GpuWork``) that waits on the call's
CUDA events.

A child of ``fork()`` has none of its parent's threads: its calls get queues of their own
(``os.register_at_fork``), and a :class:`Work` its parent made refuses :meth:`Work.wait` in
one line: the call runs in the parent, so the child would wait forever.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["PENDING", "Work", "submit"]

_queues: dict[str, ThreadPoolExecutor] = {}
# backend -> its calls queued or running, a backend with none absent (read without the lock:
# a module call asks whether its backend is in it)
PENDING: dict[str, int] = {}
_lock = threading.Lock()


class Work:
    """A call under way: :meth:`wait` for it, :meth:`is_completed` to ask."""

    def __init__(self, future: Future):
        self._future = future
        self._process = os.getpid()  # the process whose thread runs the call

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call is done (True), or ``timeout`` seconds pass (TimeoutError);
        raises what the call raised."""
        self._check_process()
        self._future.result(timeout)
        return True

    def _check_process(self) -> None:
        if os.getpid() != self._process and not self._future.done():
            raise RuntimeError(
                f"this call was started in process {self._process}, which forked this one: "
                "it runs there, not here, so it cannot be waited for"
            )

    def is_completed(self) -> bool:
        return self._future.done()

    def exception(self) -> BaseException | None:
        """What the call raised, once done (None if it succeeded); waits until then."""
        self._check_process()
        return self._future.exception()

    def __repr__(self) -> str:
        return f"Work({'done' if self._future.done() else 'running'})"


def submit(backend: str, run: Callable[[], None]) -> Work:
    """``run`` queued on ``backend``'s thread, after every call queued before it."""
    with _lock:
        queue = _queues.get(backend)
        if queue is None:
            queue = _queues[backend] = ThreadPoolExecutor(1, f"ring-{backend}-async")
        PENDING[backend] = PENDING.get(backend, 0) + 1
    future = queue.submit(run)
    future.add_done_callback(lambda _: _done(backend))
    return Work(future)


def _done(backend: str) -> None:
    with _lock:
        PENDING[backend] -= 1
        if not PENDING[backend]:
            del PENDING[backend]  # a backend with none queued is not in it at all


def _after_fork_in_child() -> None:
    """The parent's queue threads are not the child's: its calls start queues of their own."""
    global _lock
    _lock = threading.Lock()
    _queues.clear()
    PENDING.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
