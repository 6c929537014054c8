"""The gpu backend's side of the contract (:class:`ring.communicator.Backend`): CuPy arrays, one
device per node (:mod:`ring.gpu.communicator`).  ``stream=`` goes with each call, never into
which communicator is kept; ``recv=`` and ``async_op=True`` are queued on the call's
streams, not run on a host thread (:mod:`ring.gpu.caller`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..communicator import Backend, Call, RingCommunicator
from .communicator import PER_CALL_OPTIONS, cache_key, check_call, make_communicator, queued_call

__all__ = ["GpuBackend", "GpuOptions"]


@dataclass(frozen=True)
class GpuOptions:
    """A GPU communicator's options, checked (:func:`ring.gpu.communicator.cache_key`):
    what tells two communicators apart, and the options as given, for its constructor
    (the algorithm a call that names none runs)."""

    devices: tuple[int, ...] | None
    shared_devices: bool
    force_peer_copies: bool
    graphs: bool
    streams: int | None
    given: tuple[tuple[str, object], ...] = field(default=(), compare=False)


class GpuBackend(Backend):
    """CuPy, one device per node, ``backend="gpu"``."""

    name = "gpu"
    per_call_options = PER_CALL_OPTIONS
    queues_on_devices = True

    def options(self, nodes: int, options: dict) -> GpuOptions:
        kept = {k: v for k, v in options.items() if k not in PER_CALL_OPTIONS}
        _, _, devices, shared, force, graphs, streams = cache_key(nodes, **kept)
        return GpuOptions(devices, shared, force, graphs, streams, tuple(sorted(kept.items())))

    def make_communicator(self, nodes: int, options: object) -> RingCommunicator:
        assert isinstance(options, GpuOptions)
        return make_communicator(nodes, **dict(options.given))

    def check_call(self, name: str, buffers: Sequence, op: str | None, options: dict) -> Call:
        return check_call(name, buffers, op, **options)

    def queued_call(self, call: Call, send: list | None, async_op: bool) -> Call:
        return queued_call(call, send, async_op)
