"""Backend ``seed-cpp`` of the harness: the original study's compiled CPU design, as a peer.

The original C++ study's README describes its CPU ring as one ``std::jthread`` per node,
spawned for each call, reading the left neighbour's buffer directly, with one
``std::barrier`` that every node arrives at after each of the 2(N−1) steps, on chunks that
differ in length by at most one element.  ``seed_ring.cpp`` rebuilds that design (our code,
not the study's) so every report compares our rings with it on the user's own machine.

It is compiled on first use (or by ``scripts/setup.sh``) with ``g++ -O3 -march=native
-std=c++20 -pthread`` into a cache (see :mod:`.build`), loaded with ctypes, which releases
the GIL for the call, and timed with ``perf_counter`` like the other host backends.  Its
memory traffic is our cpu ring's schedule: 5(N−1)·S.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..backends import Backend, HostSession, Session, register_backend
from ..cli import BenchInputError
from .build import SeedBuildError, load_library

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = ["DTYPE_CODES", "OP_CODES", "SeedCppBackend", "allreduce", "chunk_range"]

# The element types and ops seed_ring.cpp is instantiated for, by their codes in its C ABI.
DTYPE_CODES = {"float32": 0, "float64": 1, "int32": 2, "int64": 3}
OP_CODES = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
_ERRORS = {
    1: "bad arguments (null buffer, negative count or fewer than one node)",
    2: "dtype or op code not compiled in",
    3: "the system refused to start a thread per node",
    4: "out of memory or another system resource",
}


class _Call:
    """One prepared call: the buffers' addresses are gathered once per size, not per call."""

    def __init__(self, library: ctypes.CDLL, buffers: Sequence[np.ndarray], op: str):
        dtype = _check_buffers(buffers)
        if op not in OP_CODES:
            raise ValueError(f"unknown op {op!r}: expected one of {', '.join(OP_CODES)}")
        self._function = library.seed_allreduce
        self._pointers = (ctypes.c_void_p * len(buffers))(*(b.ctypes.data for b in buffers))
        self._arguments = (len(buffers), buffers[0].shape[0], DTYPE_CODES[dtype.name], OP_CODES[op])

    def __call__(self) -> None:
        code = self._function(self._pointers, *self._arguments)
        if code:
            raise RuntimeError(f"seed_allreduce failed: {_ERRORS.get(code, f'code {code}')}")


def _check_buffers(buffers: Sequence[np.ndarray]) -> np.dtype:
    if not buffers:
        raise ValueError("need at least one buffer")
    first = buffers[0]
    if first.dtype.name not in DTYPE_CODES:
        raise TypeError(
            f"dtype {first.dtype} is not compiled in: use one of {', '.join(DTYPE_CODES)}"
        )
    for buffer in buffers:
        if buffer.dtype != first.dtype or buffer.shape != first.shape or buffer.ndim != 1:
            raise ValueError("buffers must be 1-D arrays of one dtype and length")
        if not (buffer.flags.c_contiguous and buffer.flags.writeable):
            raise ValueError("buffers must be contiguous and writeable")
    return first.dtype


def allreduce(buffers: Sequence[np.ndarray], op: str = "sum") -> None:
    """One allreduce of ``buffers`` in place by the compiled seed design (built if needed)."""
    _Call(load_library(), buffers, op)()


def chunk_range(total: int, chunks: int, index: int) -> tuple[int, int]:
    """The compiled library's chunk bounds, for checking them against ring.schedule's."""
    start, stop = ctypes.c_int64(), ctypes.c_int64()
    load_library().seed_chunk_range(total, chunks, index, ctypes.byref(start), ctypes.byref(stop))
    return start.value, stop.value


class SeedCppSession(HostSession):
    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        super().__init__(nodes, sync, config, world)
        self._library = load_library()
        self._call: _Call | None = None

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        super().load(inputs)
        self._call = _Call(self._library, self.buffers, self.op)

    def collective(self) -> None:
        if self._call is None:
            raise RuntimeError("seed-cpp: collective() before load()")
        self._call()


@register_backend
class SeedCppBackend(Backend):
    name = "seed-cpp"
    description = (
        "the original study's C++20 design: one std::jthread per node spawned per call, "
        "std::barrier after every step (compiled with g++ -O3 -march=native)"
    )
    traffic = "5(N-1)·S"

    def check(self, config: BenchConfig, world) -> None:
        if config.dtype.name not in DTYPE_CODES:
            raise BenchInputError(
                f"backend seed-cpp: dtype {config.dtype.name} is not compiled in; "
                f"use -d {', '.join(DTYPE_CODES)}"
            )
        try:
            load_library()
        except SeedBuildError as exc:
            raise BenchInputError(f"backend seed-cpp: {exc}") from None

    def traffic_bytes(self, nbytes: int, nodes: int) -> int:
        return 5 * (nodes - 1) * nbytes

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return SeedCppSession(nodes, sync, config, world)
