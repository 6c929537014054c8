"""Backend ``mpi`` of the harness: our ring over MPI ranks (:class:`ring.mpi.MpiRing`).

Registered through the ``ring.bench.backends`` entry point ``mpi`` (see pyproject.toml).
It runs under ``mpirun -n N`` next to ``mpi-allreduce``, one rank per node, timed the same
way (a barrier before each timed call, the slowest rank's time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...mpi import MpiRing
from ..algorithms import RESOLVED_COLUMN, library_algorithms
from .base import MpiSession, Session, register_backend
from .mpi_device import MpiBackend

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = ["MpiRingBackend"]


class MpiRingSession(MpiSession):
    def __init__(self, nodes: int, sync: str, config: BenchConfig, world, algorithm: str = "ring"):
        super().__init__(nodes, sync, config, world)
        self.communicator = MpiRing(world.comm, algorithm=algorithm)

    def row_extras(self) -> dict[str, Any]:
        extras = super().row_extras()
        # What auto ran, as the ranks measured it together (ring.mpi.planning).
        planned = self.communicator.planned("allreduce", self.buffers, self.op)
        if planned is not None:
            extras[RESOLVED_COLUMN] = planned[0]
        return extras

    def planning(self) -> bool:
        return self.communicator.measuring("allreduce", self.buffers, self.op)

    def collective(self) -> None:
        self.communicator.allreduce(self.buffers, self.op)

    def shared_array(self, count: int, dtype) -> np.ndarray:
        return self.communicator.shared_buffer(count, dtype)  # calls on it run by position

    def release(self) -> None:
        super().release()
        self.communicator.unbind()  # its bound call's views would keep the buffers alive

    def close(self) -> None:
        self.communicator.close()


@register_backend
class MpiRingBackend(MpiBackend):
    name = "mpi"
    description = (
        "our ring over MPI ranks (ring.mpi.MpiRing): one Sendrecv per step and segment, "
        "NumPy ufunc reduction, one rank per node, under mpirun"
    )
    # Per received chunk: one copy by the MPI transport (read + write, with a single-copy
    # transport such as Open MPI's CMA), plus the ufunc's two reads and one write in
    # reduce-scatter; all-gather receives in place.  A transport that copies twice
    # through a shared-memory queue moves more than this.
    traffic = "7(N-1)·S (one copy per message)"
    session_class = MpiRingSession
    algorithms = library_algorithms()

    def traffic_bytes(self, nbytes: int, nodes: int) -> int | None:
        # The plain ring's by messages; the other algorithms' traffic, and a call on
        # shared buffers (by position, like the cpu backend's slices), are not modelled.
        if self.variant.get("buffers") == "shared":
            return None
        return 7 * (nodes - 1) * nbytes if self.algorithm in ("", "ring") else None

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        session = self.session(config)
        return session(nodes, sync, config, world, algorithm=self.algorithm or "ring")
