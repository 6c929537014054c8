"""What every backend's communicator offers, whatever executes the schedule.

A backend module (:mod:`ring.cpu`, :mod:`ring.gpu`, :mod:`ring.mpi`) gives :mod:`ring.api`
the same four things, so the API has no backend-specific branch:

* ``check_call(name, buffers, op, **options) -> Call``: every check that needs no
  communicator, so bad input is refused before one is made (or a thread started);
* ``cache_key(nodes, **options)`` and ``make_communicator(nodes, **options)``;
* :meth:`RingCommunicator.execute`, which runs a :class:`Call` and raises
  :class:`CommunicatorClosedError` only before any of its work started, so a caller can
  retry on a fresh communicator; it turns ``algorithm="auto"`` into the algorithm to run
  with :func:`resolve_algorithm` (a decision table, :mod:`ring.auto`) once the size of the
  call is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import auto
from .schedule import AUTO, check_collective

__all__ = [
    "MAX_NODES",
    "Call",
    "CommunicatorClosedError",
    "RingCommunicator",
    "auto_generation",
    "check_buffer_list",
    "check_nodes",
    "resolve_algorithm",
]

MAX_NODES = 1024


class CommunicatorClosedError(RuntimeError):
    """Raised when a closed communicator is asked to run a collective."""


def check_nodes(nodes: object) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)):
        raise TypeError(f"nodes must be an integer, got {type(nodes).__name__}")
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes must be in [1, {MAX_NODES}], got {nodes}")
    return int(nodes)


def check_buffer_list(buffers: object) -> int:
    """The number of buffers in a list of per-node buffers, before their contents are
    checked (which needs the communicator's devices on some backends)."""
    if isinstance(buffers, (str, bytes)) or not isinstance(buffers, Sequence):
        raise TypeError(
            f"buffers must be a list of arrays, one per node, got {type(buffers).__name__}"
        )
    if len(buffers) == 0:
        raise ValueError("buffers is empty: pass one array per node")
    return len(buffers)


def resolve_algorithm(
    backend: str,
    collective: str,
    nodes: int,
    nbytes: int,
    algorithm: str,
    inline_bytes: int | None = None,
) -> str:
    """``algorithm``, or for ``auto`` the one the decision table names for this backend,
    collective, N and bytes per node (:func:`ring.auto.choose`, cached per call shape);
    ``inline_bytes``: the cpu communicator's, which says how its call runs."""
    if algorithm != AUTO:
        return algorithm
    return auto.choose(backend, collective, nodes, nbytes, inline_bytes)


def auto_generation() -> int:
    """:func:`ring.auto.generation`: while it stays, every pick already made stands."""
    return auto.generation()


@dataclass(frozen=True)
class Call:
    """One collective call, checked as far as its backend can without a communicator.

    ``nodes`` is the size of communicator it needs; ``options`` are the per-call options
    the backend takes with each call (MPI's ``segment_bytes``); ``checked`` is what the
    backend's checks found, handed to its :meth:`~RingCommunicator.execute` so nothing is
    checked twice.
    """

    backend: str
    name: str
    buffers: Sequence
    op: str | None
    nodes: int
    options: dict[str, Any] = field(default_factory=dict)
    checked: Any = None


class RingCommunicator:
    """The three collectives and the context-manager protocol.

    A backend implements ``check_call`` (module level), :meth:`execute`, ``close()`` and
    ``_closed``; under MPI, "node ``i``" is rank ``i``.
    """

    backend: str
    _closed: bool

    def allreduce(self, buffers: Sequence, op: str = "sum") -> None:
        """Reduce the nodes' buffers element-wise with ``op``; every node gets the result."""
        self._collective("allreduce", buffers, op)

    def reduce_scatter(self, buffers: Sequence, op: str = "sum") -> None:
        """Afterwards node ``i`` holds chunk ``owned_chunk(i, N)`` fully reduced."""
        self._collective("reduce_scatter", buffers, op)

    def all_gather(self, buffers: Sequence) -> None:
        """Copy chunk ``owned_chunk(i, N)`` of every node ``i`` to all nodes (no reduction)."""
        self._collective("all_gather", buffers, None)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        raise NotImplementedError

    def execute(self, call: Call) -> None:
        """Run a call its backend's ``check_call`` accepted."""
        raise NotImplementedError

    def _collective(self, name: str, buffers: Sequence, op: str | None) -> None:
        raise NotImplementedError

    def _check_call_backend(self, call: Call) -> None:
        check_collective(call.name)
        if call.backend != self.backend:
            raise ValueError(
                f"a call checked for backend {call.backend!r} cannot run on a "
                f"{self.backend!r} communicator"
            )

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
