"""A watchdog for harness runs that must not hang.

A peer that died or stopped answering leaves the other MPI ranks blocked inside MPI, where
no Python code runs; a timer thread is the one place left to end the job from.
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["Watchdog"]


class Watchdog:
    """Abort the whole MPI job if it is still running ``seconds`` after :meth:`start`.

    A peer that died or stopped answering leaves the others blocked inside MPI, where no
    Python code runs; a timer thread is the one place left to end the job from.  It prints
    ``message`` and calls ``MPI.COMM_WORLD.Abort(exit_code)``, which makes ``mpirun`` kill
    every rank; a process that never started MPI just exits with ``exit_code``.  ``seconds``
    of ``None`` or 0 disables it.
    """

    def __init__(
        self,
        seconds: float | None,
        *,
        message: str = "timed out",
        exit_code: int = 124,
        stream=None,
    ):
        if seconds is not None and (isinstance(seconds, bool) or not seconds >= 0):
            raise ValueError(f"timeout must be a number of seconds >= 0, got {seconds!r}")
        self.seconds = seconds or None
        self.message = message
        self.exit_code = exit_code
        self._stream = stream
        self._timer: threading.Timer | None = None

    def start(self) -> Watchdog:
        if self.seconds is not None and self._timer is None:
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cancel()

    def _fire(self) -> None:
        # Only a process that already uses MPI aborts through it: importing mpi4py.MPI here
        # would start an MPI world in a process that never asked for one.
        MPI = sys.modules.get("mpi4py.MPI")
        world = (
            MPI.COMM_WORLD
            if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized()
            else None
        )
        live = world is not None
        where = f"rank {world.Get_rank()}" if world is not None else f"process {os.getpid()}"
        what = "the MPI job" if live else "this process"
        stream = self._stream or sys.stderr
        stream.write(
            f"{self.message}: {where} still running after {self.seconds:g} s; aborting {what}\n"
        )
        stream.flush()
        if world is not None:
            world.Abort(self.exit_code)
        os._exit(self.exit_code)
