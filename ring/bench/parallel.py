"""A small pool of persistent threads for the memory-bound kernels of the harness
(``numpy-direct`` and the ceilings): NumPy ufuncs release the GIL on large arrays, so
T threads each working on one part of a buffer use T cores.

It signals with raw locks because a ``concurrent.futures`` round trip costs tens of
microseconds, which would make the peer look slower than it is at small sizes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

__all__ = ["WorkerPool", "usable_cores"]


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _locked() -> threading.Lock:
    lock = threading.Lock()
    lock.acquire()
    return lock


class WorkerPool:
    """``run(fn, parts)`` calls ``fn(0) .. fn(parts - 1)`` concurrently, the caller taking
    part 0, and returns when all are done; ``parts`` is at most ``threads``."""

    def __init__(self, threads: int | None = None):
        self.threads = usable_cores() if threads is None else max(1, int(threads))
        self._closed = False
        self._task: Callable[[int], None] | None = None
        self._errors: list[BaseException] = []
        self._start = [_locked() for _ in range(self.threads)]
        self._done = [_locked() for _ in range(self.threads)]
        self._workers = [
            threading.Thread(target=self._work, args=(part,), name=f"bench-pool{part}", daemon=True)
            for part in range(1, self.threads)
        ]
        for worker in self._workers:
            worker.start()

    @property
    def native_ids(self) -> list[int]:
        """The OS ids of the pool's own threads (parts 1..; part 0 runs on the caller)."""
        return [w.native_id for w in self._workers if w.native_id is not None]

    def run(self, fn: Callable[[int], None], parts: int) -> None:
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        if not 1 <= parts <= self.threads:
            raise ValueError(f"parts must be in [1, {self.threads}], got {parts}")
        self._task = fn
        self._errors.clear()
        for part in range(1, parts):
            self._start[part].release()
        try:
            fn(0)
        finally:
            for part in range(1, parts):
                self._done[part].acquire()
            self._task = None
        if self._errors:
            raise self._errors[0]

    def _work(self, part: int) -> None:
        start, done = self._start[part], self._done[part]
        while True:
            start.acquire()
            if self._closed:
                return
            task = self._task
            assert task is not None, "run() sets the task before it releases a worker"
            try:
                task(part)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller of run()
                self._errors.append(exc)
            finally:
                done.release()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for part in range(1, self.threads):
            # A Ctrl-C between run()'s release of a worker and the worker taking it leaves
            # its start released: the worker wakes either way and sees the pool closed.
            with contextlib.suppress(RuntimeError):
                self._start[part].release()
        for worker in self._workers:
            worker.join(timeout=5)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
