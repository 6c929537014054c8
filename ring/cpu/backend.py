"""The cpu backend's side of the contract (:class:`ring.communicator.Backend`): the threaded NumPy
communicator of :mod:`ring.cpu.communicator`, and the bound-call cache of the module
functions.

A module call (``ring.allreduce(buffers, algorithm="auto")``) runs as a held communicator's
call does: on the kept communicator of its ``sync``, with its other options given per call,
so none of one call's options becomes a default of the next, and bound when it repeats on
the same buffers.  The first call of a collective and options (or the first after its
communicator closed) is checked in full before it runs; the same call again finds its
communicator and key by the options as written, and the communicator's bound call checks
the buffers (:meth:`~ring.cpu.communicator.CpuCommunicator.keyed_call`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..communicator import Backend, Call, CommunicatorClosedError, RingCommunicator
from .checks import CpuOptions, check_call, communicator_options
from .communicator import CpuCommunicator

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """The threads-over-NumPy backend, ``backend="cpu"``."""

    name = "cpu"

    def __init__(self) -> None:
        super().__init__()
        # (collective, N, the options as written) -> the communicator, the key its bound
        # calls are kept under, and the options' types where one is not a str.  A dict
        # finds an equal key, so 4096.0 or True finds the entry of 4096 or 1: the types
        # tell them apart, for the full checks to refuse.
        self._calls: dict[tuple, tuple[CpuCommunicator, object, tuple | None]] = {}
        # collective -> (N, options, entry) of its last call that found one: the same call
        # again compares dicts instead of building and hashing a key.
        self._last: dict[str, tuple] = {}

    def options(self, nodes: int, options: dict) -> CpuOptions:
        return communicator_options(nodes, options)

    def make_communicator(self, nodes: int, options: object) -> RingCommunicator:
        assert isinstance(options, CpuOptions)
        return CpuCommunicator(nodes, **options.arguments())

    def check_call(self, name: str, buffers: Sequence, op: str | None, options: dict) -> Call:
        return check_call(name, buffers, op, **options)

    def run(self, name: str, buffers, op: str | None, options: dict) -> None:
        """The call on the communicator that calls of its options ran on before, bound
        where it repeats (the look-up and the call inline: at a few KiB each frame is a
        share of the call); the first of its options checked in full (:meth:`_first`)."""
        if type(buffers) is list:
            last = self._last.get(name)
            try:
                if last is not None and last[0] == len(buffers) and last[1] == options:
                    entry = last[2]
                else:
                    entry = self._calls.get((name, len(buffers), *options.items()))
                    if entry is not None:
                        self._last[name] = (len(buffers), options, entry)
            except (TypeError, ValueError):  # an option of no plain type: checked in full
                entry = None
            if entry is not None:  # a closed communicator refuses the call before any work
                comm: CpuCommunicator = entry[0]
                key, types = entry[1], entry[2]
                if types is None or types == tuple(map(type, options.values())):
                    try:
                        comm.keyed_call(key, name, buffers, op, options)
                        return
                    except CommunicatorClosedError:
                        pass  # closed before the call started: a new communicator
        self._first(name, buffers, op, options)

    def _first(self, name: str, buffers, op: str | None, options: dict) -> None:
        """A call of options not run before (or whose communicator closed), checked in
        full on one snapshot of the caller's list, then kept."""
        buffers = self.checked_buffers(buffers)
        while True:
            comm, key, _ = self._keep(name, buffers, op, options)
            try:
                comm.keyed_call(key, name, buffers, op, options)
                return
            except CommunicatorClosedError:
                continue  # closed by another thread's failed call before this one started

    def _keep(
        self, name: str, buffers: list, op, options: dict
    ) -> tuple[CpuCommunicator, object, tuple | None]:
        """The entry of a first call of its options, checked in full."""
        self.check_call(name, buffers, op, options)
        sync = {"sync": options["sync"]} if "sync" in options else {}
        given = tuple(options.items())
        types = tuple(map(type, options.values()))
        comm = self.communicator(len(buffers), sync)
        assert isinstance(comm, CpuCommunicator)
        entry = self._calls[(name, len(buffers), *given)] = (
            comm,
            (name, *given) if given else name,
            None if all(kind is str for kind in types) else types,
        )
        self._last.pop(name, None)  # it may hold the entry just replaced
        return entry

    def close(self) -> None:
        super().close()
        self._calls.clear()
        self._last.clear()
