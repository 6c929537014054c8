"""What every backend's communicator offers, whatever executes the schedule."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["CommunicatorClosedError", "RingCommunicator"]


class CommunicatorClosedError(RuntimeError):
    """Raised when a closed communicator is asked to run a collective."""


class RingCommunicator:
    """The three collectives and the context-manager protocol.

    A backend implements ``_collective(name, buffers, op)`` (``op`` is None for
    all_gather), ``close()`` and ``_closed``; under MPI, "node ``i``" is rank ``i``.
    """

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

    def _collective(self, name: str, buffers: Sequence, op: str | None) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
