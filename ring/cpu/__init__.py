"""The threaded NumPy backend: one worker thread per logical node (:mod:`ring.cpu.communicator`),
the threads and how they wait for each other (:mod:`ring.cpu.crew`); what
a node does to the arrays at each step is :mod:`ring.host`'s."""

from .communicator import (
    EXECUTORS,
    INLINE_BYTES,
    SYNC_MODES,
    CommunicatorClosedError,
    CpuCommunicator,
    CpuOptions,
    check_call,
    check_executor,
    check_sync,
    communicator_options,
)

__all__ = [
    "EXECUTORS",
    "INLINE_BYTES",
    "SYNC_MODES",
    "CommunicatorClosedError",
    "CpuCommunicator",
    "CpuOptions",
    "check_call",
    "check_executor",
    "check_sync",
    "communicator_options",
]
