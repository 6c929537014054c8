"""Ring-allreduce from scratch: one schedule, executed by threads, GPUs or MPI ranks.

The names below load on first use (PEP 562), so that ``ring.study`` (the study definition
the workflow reads when Snakemake plans) imports without NumPy: Snakemake may plan from an
environment of its own that has only Snakemake in it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import all_gather, allreduce, get_communicator, reduce_scatter
    from .communicator import CommunicatorClosedError, RingCommunicator
    from .cpu import CpuCommunicator
    from .ops import OPS, ReduceOp
    from .schedule import Transfer, chunk_range, owned_chunk, ring_schedule

from ._version import __version__ as __version__

# Each public name and the module that defines it.
_HOMES = {
    "all_gather": "api",
    "allreduce": "api",
    "get_communicator": "api",
    "reduce_scatter": "api",
    "CommunicatorClosedError": "communicator",
    "RingCommunicator": "communicator",
    "CpuCommunicator": "cpu",
    "OPS": "ops",
    "ReduceOp": "ops",
    "Transfer": "schedule",
    "chunk_range": "schedule",
    "owned_chunk": "schedule",
    "ring_schedule": "schedule",
}

__all__ = [
    "OPS",
    "CommunicatorClosedError",
    "CpuCommunicator",
    "ReduceOp",
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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        # A submodule (ring.nvtx, ring.ops...), as after an eager import of the names.
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'ring' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
