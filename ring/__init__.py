"""Ring-allreduce from scratch: one schedule, executed by threads, GPUs or MPI ranks."""

from .api import all_gather, allreduce, get_communicator, reduce_scatter
from .communicator import CommunicatorClosedError, RingCommunicator
from .cpu import CpuCommunicator
from .ops import OPS
from .schedule import Transfer, chunk_range, owned_chunk, ring_schedule

__version__ = "0.1.0"

__all__ = [
    "OPS",
    "CommunicatorClosedError",
    "CpuCommunicator",
    "RingCommunicator",
    "Transfer",
    "all_gather",
    "allreduce",
    "chunk_range",
    "get_communicator",
    "owned_chunk",
    "reduce_scatter",
    "ring_schedule",
]
