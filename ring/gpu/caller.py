"""The caller's side of a GPU call: which of the caller's streams it is ordered on, the
copies of an out-of-place call, and the handle ``async_op=True`` returns.

NCCL's ``ncclAllReduce(..., stream)`` is the model.  A call runs on the communicator's own
streams; what changes is what it starts after and who waits for it:

* ``stream=None`` (the default): after the work queued on the caller's *current* stream
  of every device the nodes use; the host then waits until the call is done.
* ``stream=s`` (one CuPy stream, every node on ``s``'s device) or ``stream=[s0, ...]``
  (one per node, node ``i``'s on node ``i``'s device): after the work queued on those
  streams, and work queued on them afterwards runs after the call.  The host does not
  wait: the streams carry the order, as they do for NCCL.
* ``async_op=True``: as ``stream=``, on the given streams or else the current ones, and
  the call returns a :class:`GpuWork` whose ``wait()`` makes the host wait for it.
* ``recv=`` (out of place): each ``send[i]`` is copied into ``recv[i]`` on node ``i``'s
  device and call stream, before the collective, so the copies are ordered like the call
  and an asynchronous call does not wait for them on the host either.  Leave ``send``
  and ``recv`` alone until the call is done (``wait()``, or work queued on its streams).

The streams are checked before anything is queued: their type and count when the call
is checked (:func:`check_stream`), their devices against the nodes' by the communicator
(:func:`node_streams`).  None of this is part of a communicator: each call says it anew.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..communicator import copy_in
from ..work import Work

__all__ = ["BLOCKING", "GpuWork", "Ordering", "check_stream", "copy_sends", "node_streams"]


@dataclass(frozen=True)
class Ordering:
    """How one call is ordered on the caller's side (a :class:`ring.communicator.Call`'s
    ``checked``): the given streams (1 or N; None: the current ones), the inputs to copy
    in first (``recv=``; None: in place) and whether it returns a handle (``async_op``)."""

    streams: tuple | None = None
    send: list | None = None
    handle: bool = False

    @property
    def blocking(self) -> bool:
        """Whether the host waits for the call before it returns (no stream, no handle)."""
        return self.streams is None and not self.handle


BLOCKING = Ordering()


def _is_stream(value: object) -> bool:
    """A CuPy stream (``cupy.cuda.Stream``, ``Stream.null``, ``ExternalStream``), by what
    the communicator uses of it."""
    return (
        isinstance(getattr(value, "ptr", None), int)
        and isinstance(getattr(value, "device_id", None), int)
        and callable(getattr(value, "wait_event", None))
    )


def check_stream(value: object, nodes: int) -> tuple | None:
    """``stream=`` as a tuple of one stream (for every node) or ``nodes`` streams, or None;
    a TypeError or ValueError that says what is wrong."""
    if value is None:
        return None
    if _is_stream(value):
        return (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(
            "stream must be a CuPy stream (cupy.cuda.Stream, or cupy.cuda.ExternalStream "
            f"wrapping another library's) or a list of one per node, got {type(value).__name__}"
        )
    streams = tuple(value)
    if len(streams) != nodes:
        raise ValueError(
            f"stream: {len(streams)} streams given for {nodes} nodes: pass one per node "
            "(node i's on node i's device), or one stream for nodes that share its device"
        )
    for i, stream in enumerate(streams):
        if not _is_stream(stream):
            raise TypeError(f"stream[{i}] is not a CuPy stream, got {type(stream).__name__}")
    return streams


def node_streams(devices: Sequence[int], given: tuple) -> tuple:
    """Every node's stream of ``given`` (one, or one per node), checked against the
    node's device; a stream of device -1 (``Stream.null``) is that of every device."""
    streams = given * len(devices) if len(given) == 1 else given
    for i, (stream, device) in enumerate(zip(streams, devices, strict=True)):
        where = stream.device_id
        if where >= 0 and where != device:
            name = "stream" if len(given) == 1 else f"stream[{i}]"
            hint = (
                "pass one stream per node (stream=[...], node i's on its device)"
                if len(given) == 1
                else "create it under cupy.cuda.Device(...) of its node"
            )
            raise ValueError(
                f"{name} is on device {where} but node {i} runs on device {device}: {hint}"
            )
    return streams


def copy_sends(cupy, devices: Sequence[int], send: list, recv: list, streams: Sequence) -> None:
    """``send[i]`` into ``recv[i]`` on node ``i``'s device and call stream ``streams[i]``."""
    for i, (mine, out) in enumerate(zip(send, recv, strict=True)):
        with cupy.cuda.Device(devices[i]), streams[i]:
            copy_in([mine], [out])


class GpuWork(Work):
    """A GPU call queued with ``async_op=True``: done once every stream the call was
    ordered on has passed it (an event recorded on each right after its wait for the
    call).  ``wait()`` makes the host wait for that; a fault on the device raises there."""

    def __init__(self, events: list[Any]):
        # No Future: the events are the call.
        self._events = events

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the call is done (True), or ``timeout`` seconds pass (TimeoutError)."""
        if timeout is None:
            for event in self._events:
                event.synchronize()
            return True
        deadline = time.monotonic() + timeout
        while not self.is_completed():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the GPU call was not done within {timeout} s")
            time.sleep(1e-4)
        return self.wait()  # done: raises a device fault, as without timeout

    def is_completed(self) -> bool:
        return all(event.done for event in self._events)

    def exception(self) -> BaseException | None:
        """What the device reported for the call once done (None if it succeeded)."""
        try:
            self.wait()
        except RuntimeError as exc:  # CUDARuntimeError: what the device raised for it
            return exc
        return None

    def __repr__(self) -> str:
        return f"GpuWork({'done' if self.is_completed() else 'queued'})"
