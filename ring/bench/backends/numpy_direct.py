"""Backend ``numpy-direct``: the shared-memory optimum our ring is compared with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...ops import AVERAGING, divide_by_nodes
from ...schedule import chunk_range
from ..parallel import WorkerPool
from ..placement import add_pin_argument, pin_native_threads, pin_requested
from .base import Backend, HostSession, Session, register_backend

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = ["NumpyDirectBackend", "NumpyDirectSession"]
# Below this many bytes per part, handing work to another thread costs more than it saves.
NUMPY_DIRECT_MIN_PART_BYTES = 1 << 20
# Each block of buffer 0 accumulates all N inputs while it sits in the L2 cache, so memory
# sees every input read once and every output written once.
NUMPY_DIRECT_BLOCK_BYTES = 128 << 10


class NumpyDirectSession(HostSession):
    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        super().__init__(nodes, sync, config, world)
        self.pool = WorkerPool()
        self.workers = self.pool.threads
        if pin_requested(config):
            # Parts 1.. run on the pool's threads, part 0 on the caller, which keeps its
            # mask: threads started later (another session's) inherit it.
            self.pinned = pin_native_threads(self.pool.native_ids, first=1)
        self._block = max(1, NUMPY_DIRECT_BLOCK_BYTES // config.dtype.itemsize)
        self._average = config.op in AVERAGING
        self._parts = 1
        self._bounds: list[tuple[int, int]] = []

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        super().load(inputs)
        count = self._inputs[0].shape[0]
        nbytes = count * self.dtype.itemsize
        self._parts = min(self.pool.threads, max(1, nbytes // NUMPY_DIRECT_MIN_PART_BYTES))
        self._bounds = [chunk_range(count, self._parts, p) for p in range(self._parts)]

    def _reduce_part(self, part: int) -> None:
        start, stop = self._bounds[part]
        first, others = self.buffers[0], self.buffers[1:]
        ufunc = self.ufunc
        for a in range(start, stop, self._block):
            b = min(a + self._block, stop)
            acc = first[a:b]
            for buffer in others:
                ufunc(acc, buffer[a:b], out=acc)
            if self._average:
                divide_by_nodes(acc, self.nodes)
            for buffer in others:
                buffer[a:b] = acc

    def collective(self) -> None:
        if self.nodes > 1:
            self.pool.run(self._reduce_part, self._parts)

    def close(self) -> None:
        self.pool.close()


@register_backend
class NumpyDirectBackend(Backend):
    name = "numpy-direct"
    description = (
        "each block reduced once across all N buffers with one ufunc per input and written "
        "back to every buffer, on as many threads as cores"
    )
    traffic = "2N·S"

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_pin_argument(parser)  # the cpu backend's flag, shared

    def traffic_bytes(self, nbytes: int, nodes: int) -> int:
        return 2 * nodes * nbytes if nodes > 1 else 0

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return NumpyDirectSession(nodes, sync, config, world)
