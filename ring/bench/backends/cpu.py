"""Backend ``cpu``: our ring on one persistent thread per node (:class:`ring.CpuCommunicator`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...cpu import SYNC_MODES, CpuCommunicator
from ..algorithms import library_algorithms
from ..ceilings import copy_traffic_bytes
from ..placement import add_pin_argument, pin_native_threads, pin_requested
from .base import Backend, HostSession, Session, register_backend

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = ["CpuBackend", "CpuSession", "ring_traffic_bytes"]


class CpuSession(HostSession):
    def __init__(self, nodes: int, sync: str, config: BenchConfig, world, algorithm: str = "ring"):
        super().__init__(nodes, sync, config, world)
        self.communicator = CpuCommunicator(nodes, sync=sync, algorithm=algorithm)
        if pin_requested(config) and nodes > 1:
            # The communicator's worker threads, one per node (a caller only waits).
            threads = self.communicator.threads
            self.pinned = pin_native_threads(
                t.native_id for t in threads if t.native_id is not None
            )

    def collective(self) -> None:
        self.communicator.allreduce(self.buffers, self.op)

    def close(self) -> None:
        self.communicator.close()


def ring_traffic_bytes(nbytes: int, nodes: int, threshold: int | None = None) -> int:
    """Memory-bus bytes of one ring allreduce of ``nbytes`` per node over one memory."""
    if nodes < 2:
        return 0
    # Each chunk is copied to the N-1 other nodes; chunk sizes differ by at most one unit.
    chunks = [nbytes // nodes + (c < nbytes % nodes) for c in range(nodes)]
    copies = sum(copy_traffic_bytes(chunk, threshold) for chunk in chunks)
    return 3 * (nodes - 1) * nbytes + (nodes - 1) * copies


@register_backend
class CpuBackend(Backend):
    name = "cpu"
    description = "our ring on one persistent thread per node (ring.CpuCommunicator)"
    # Reduce-scatter: a += b in place, 3 bytes per byte; all-gather: memcpy of each chunk,
    # 3 bytes per byte below glibc's non-temporal threshold and 2 from it up (the
    # convention of ring.bench.ceilings, so the series and the ceilings count alike).
    traffic = "3(N-1)·S + 3(N-1)·S (2(N-1)·S for chunks at or above the memcpy NT threshold)"
    sync_modes = SYNC_MODES
    algorithms = library_algorithms()

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_pin_argument(parser)

    def check(self, config: BenchConfig, world) -> None:
        pin_requested(config)

    def traffic_bytes(self, nbytes: int, nodes: int) -> int | None:
        # The formula is the plain ring's; the other algorithms' traffic is not modelled.
        return ring_traffic_bytes(nbytes, nodes) if self.algorithm in ("", "ring") else None

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return CpuSession(nodes, sync, config, world, self.algorithm or "ring")
