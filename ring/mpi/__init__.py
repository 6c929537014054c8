"""The MPI backend: one buffer per rank (:class:`MpiRing`, :mod:`ring.mpi.communicator`); how the
ranks agree on a call (:mod:`ring.mpi.agree`), run its steps (:mod:`ring.mpi.steps`), bind a
repeated call (:mod:`ring.mpi.bound`), share one node's memory (:mod:`ring.mpi.shared`) and
hand device buffers to a CUDA-aware MPI (:mod:`ring.mpi.cuda`)."""

from .communicator import (
    CUDA_AWARE_ENV,
    DEFAULT_SEGMENT_BYTES,
    PER_CALL_OPTIONS,
    RANKS_CHECK_TOGETHER,
    MpiRing,
    all_ranks_ok,
    cache_key,
    check_async,
    check_call,
    cuda_aware,
    make_communicator,
)

__all__ = [
    "CUDA_AWARE_ENV",
    "DEFAULT_SEGMENT_BYTES",
    "PER_CALL_OPTIONS",
    "RANKS_CHECK_TOGETHER",
    "MpiRing",
    "all_ranks_ok",
    "cache_key",
    "check_async",
    "check_call",
    "cuda_aware",
    "make_communicator",
]
