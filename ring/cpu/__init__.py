"""The threaded NumPy backend: one worker thread per logical node (:mod:`ring.cpu.communicator`),
the checks of a call's inputs (:mod:`ring.cpu.checks`), how a call is planned
(:mod:`ring.cpu.planned`, :mod:`ring.cpu.planning`) and run (:mod:`ring.cpu.execution`), the
threads and how they wait for each other (:mod:`ring.cpu.crew`); what a node does to the arrays
at each step is :mod:`ring.host`'s."""

from .checks import (
    EXECUTORS,
    INLINE_BYTES,
    SYNC_MODES,
    CpuOptions,
    check_call,
    check_executor,
    check_sync,
    communicator_options,
)
from .communicator import CommunicatorClosedError, CpuCommunicator

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
