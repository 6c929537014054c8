"""The mpi backend's side of the contract (:class:`ring.communicator.Backend`): one buffer per rank
on the :class:`~ring.mpi.communicator.MpiRing` of a communicator (``comm``, default
``MPI.COMM_WORLD``).  The per-call options (algorithm, segment_bytes, group_size) go with
each call, where every rank compares them, never into which ring is kept: a key per value
would let one rank make a new ring (a collective ``Dup``) while the others call the kept
one.  A refused out-of-place argument is raised inside the call, on every rank together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..communicator import Backend, Call, RingCommunicator
from .communicator import (
    PER_CALL_OPTIONS,
    MpiRing,
    all_ranks_ok,
    cache_key,
    check_async,
    check_call,
    make_communicator,
)

__all__ = ["MpiBackend", "MpiOptions"]


@dataclass(frozen=True)
class MpiOptions:
    """A ring's options, checked: its MPI communicator (``None``: ``MPI.COMM_WORLD``),
    told apart by its Fortran handle."""

    handle: int
    comm: object = field(default=None, compare=False)


class MpiBackend(Backend):
    """One rank per node over mpi4py, ``backend="mpi"``."""

    name = "mpi"
    per_call_options = PER_CALL_OPTIONS
    ranks_check_together = True
    made_with_per_call_options = "ring.mpi.MpiRing(comm, {}=...)"

    def options(self, nodes: int, options: dict) -> MpiOptions:
        return MpiOptions(cache_key(nodes, **options)[1], options.get("comm"))

    def make_communicator(self, nodes: int, options: object) -> RingCommunicator:
        assert isinstance(options, MpiOptions)
        return make_communicator(nodes, comm=options.comm)

    def check_call(self, name: str, buffers: Sequence, op: str | None, options: dict) -> Call:
        return check_call(name, buffers, op, **options)

    def communicator(self, nodes: int, options: dict) -> RingCommunicator:
        # The per-call options are the call's: the ring is the communicator's alone.
        ring = {k: v for k, v in options.items() if k not in PER_CALL_OPTIONS}
        return self.kept(nodes, self.options(nodes, ring))

    def check_async(self) -> None:
        check_async()

    def all_ranks_ok(self, comm: RingCommunicator, ok: bool) -> bool:
        assert isinstance(comm, MpiRing)
        return all_ranks_ok(comm, ok)
