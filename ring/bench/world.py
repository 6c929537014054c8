"""The processes one run spans: this process alone, or every rank of an ``mpirun`` launch.

Whether we run under ``mpirun`` is read from the launcher's environment variables, before
``mpi4py.MPI`` is imported: importing it outside a launcher starts a singleton MPI world,
which on some installations spawns helper daemons or hangs instead of failing.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from .._optional import require
from .cli import BenchInputError

__all__ = ["LocalWorld", "MpiWorld", "launched_rank", "launched_size", "under_mpirun"]

# Open MPI sets OMPI_COMM_WORLD_*, MPICH's Hydra and Intel MPI set PMI_*, PMIx launchers
# (Open MPI 5, srun --mpi=pmix) set PMIX_RANK.
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


def _env_int(names) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def under_mpirun() -> bool:
    """True when an MPI launcher started this process."""
    return any(name in os.environ for name in (*_SIZE_VARS, *_RANK_VARS))


def launched_size() -> int | None:
    """The world size the launcher announced, or None outside a launcher (or if unknown)."""
    return _env_int(_SIZE_VARS) if under_mpirun() else None


def launched_rank() -> int:
    """This process's rank as the launcher announced it (0 outside a launcher)."""
    return _env_int(_RANK_VARS) or 0


class LocalWorld:
    """One process: every collective on the world is trivial."""

    rank = 0
    size = 1
    local_size = 1
    local_rank = 0
    hosts = 1
    comm = None
    is_root = True

    def barrier(self) -> None:
        pass

    def idle_barrier(self) -> None:
        pass

    def sum_int(self, value: int) -> int:
        return int(value)

    def gather_rows(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values, dtype=np.float64).reshape(1, -1)

    def library_version(self) -> str | None:
        return None

    def root_verdict(self, error: str | None) -> None:
        """Raise ``error`` (rank 0's finding) as a BenchInputError; see MpiWorld."""
        if error is not None:
            raise BenchInputError(error)

    def all_stopped(self, seconds: float) -> bool:
        """Whether every rank stopped its sweep too: this one is all there is."""
        return True

    def abort(self, code: int) -> None:
        raise SystemExit(code)


class MpiWorld:
    """Every rank of ``MPI.COMM_WORLD``; rank 0 prints and writes the result files."""

    def __init__(self, feature: str):
        require("mpi4py", feature)
        if not under_mpirun():
            raise BenchInputError(
                f"backend {feature} must be launched under mpirun, e.g. "
                f"mpirun -n 2 python -m ring.bench --backend {feature}"
            )
        self.MPI = require("mpi4py.MPI", feature)
        self.comm = self.MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.is_root = self.rank == 0
        # ranks on this host (they share its memory)
        local = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED)
        self.local_size = local.Get_size()
        self.local_rank = local.Get_rank()
        local.Free()
        # machines the ranks run on (one local rank 0 each): the rows' "one host" label
        self.hosts = self.comm.allreduce(int(self.local_rank == 0))
        # Its own communicator, so the ranks' agreement to stop a sweep (all_stopped) can
        # never be matched with a collective of the measurement.
        self._stopping = self.comm.Dup()
        _abort_on_uncaught_exception(self.MPI)

    def barrier(self) -> None:
        self.comm.Barrier()

    def idle_barrier(self) -> None:
        """A barrier that sleeps instead of spinning, so ranks waiting here leave the cores
        to a rank that measures (MPI_Barrier busy-polls)."""
        request = self.comm.Ibarrier()
        while not request.Test():
            time.sleep(0.001)

    def sum_int(self, value: int) -> int:
        return int(self.comm.allreduce(int(value), op=self.MPI.SUM))

    def root_verdict(self, error: str | None) -> None:
        """Rank 0 alone checks some things (its output files); every rank learns the answer
        and raises the same BenchInputError, so no rank is left waiting for the others."""
        error = self.comm.bcast(error, root=0)
        if error is not None:
            raise BenchInputError(error)

    def all_stopped(self, seconds: float) -> bool:
        """Whether every rank stopped its sweep within ``seconds`` of this one: a failure
        every rank sees alike (the library raises the same error on every rank) ends the
        sweep everywhere and the measured sizes can be kept; a failure of this rank alone
        leaves the others blocked inside MPI, and only :meth:`abort` ends them."""
        request = self._stopping.Ibarrier()
        deadline = time.monotonic() + seconds
        while not request.Test():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def abort(self, code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)

    def gather_rows(self, values: np.ndarray) -> np.ndarray:
        """Every rank's ``values`` (the same length on each), as rows in rank order."""
        values = np.ascontiguousarray(values, dtype=np.float64)
        rows = np.empty((self.size, values.size), dtype=np.float64)
        self.comm.Allgather(values, rows)
        return rows

    def library_version(self) -> str | None:
        # Open MPI pads the string with NUL bytes.
        return self.MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0] or None


def _abort_on_uncaught_exception(MPI) -> None:
    """What ``python -m mpi4py`` does: an exception no code catches on one rank aborts the
    whole job, instead of leaving the other ranks blocked in their next collective."""
    previous = sys.excepthook

    def hook(kind, value, traceback) -> None:
        previous(kind, value, traceback)
        sys.stderr.flush()
        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook
