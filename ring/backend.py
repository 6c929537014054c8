"""The backend contract: what :mod:`ring.api` dispatches a call to, one class per backend,
registered by name.

As torch.distributed's process groups do, a backend is an object with the collectives'
entry points as methods (:class:`Backend`): it checks a call's options once into a frozen,
typed options object of its own (:meth:`Backend.options`), which is also the key of the
communicator it runs on; it checks a call before a communicator is made
(:meth:`Backend.check_call`), makes and keeps its communicators (:meth:`Backend.communicator`)
and runs an in-place call (:meth:`Backend.run`: the cpu's keeps the call bound to its
buffers, so a repeated module call costs what a held communicator's does).  What a backend
can do beyond the common path it says in class attributes, never by what its module
happens to define: ``per_call_options``, ``ranks_check_together`` (mpi),
``queues_on_devices`` (gpu).

The backends are registered by the module and class that implement them
(:data:`REGISTERED`), imported on first use, so their optional packages stay optional;
:func:`register` adds one.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Hashable, Sequence
from typing import ClassVar

from .communicator import Call, CommunicatorClosedError, RingCommunicator, check_buffer_list
from .work import Work

__all__ = ["REGISTERED", "Backend", "backend", "close_all", "register"]

# Backend name -> "module:Class" of its Backend, imported on first use.
REGISTERED = {
    "cpu": "ring.cpu.backend:CpuBackend",
    "gpu": "ring.gpu.backend:GpuBackend",
    "mpi": "ring.mpi.backend:MpiBackend",
}


class Backend:
    """One backend's side of every collective; :mod:`ring.api` holds one per name."""

    name: ClassVar[str]
    # Options of each call, not of its communicator: get_communicator refuses them.
    per_call_options: ClassVar[tuple[str, ...]] = ()
    # A refused out-of-place argument is raised inside the call, on every rank together.
    ranks_check_together: ClassVar[bool] = False
    # recv= and async_op=True are queued on the call's device streams (queued_call).
    queues_on_devices: ClassVar[bool] = False

    def __init__(self) -> None:
        self._communicators: dict[Hashable, RingCommunicator] = {}
        self._lock = threading.Lock()

    def options(self, nodes: int, options: dict) -> Hashable:
        """The communicator's options, checked once, as a frozen options object (the key
        its communicator is kept under)."""
        raise NotImplementedError

    def make_communicator(self, nodes: int, options: Hashable) -> RingCommunicator:
        """A new communicator of the checked ``options``."""
        raise NotImplementedError

    def check_call(self, name: str, buffers: Sequence, op: str | None, options: dict) -> Call:
        """Every check of a call that needs no communicator, so bad input is refused
        before one is made."""
        raise NotImplementedError

    def communicator(self, nodes: int, options: dict) -> RingCommunicator:
        """The kept, open communicator of ``options`` (a new one if the last was closed)."""
        return self.kept(nodes, self.options(nodes, options))

    def kept(self, nodes: int, checked: Hashable) -> RingCommunicator:
        """The kept, open communicator of the checked options ``checked``."""
        key = (nodes, checked)
        with self._lock:
            comm = self._communicators.get(key)
            if comm is None or comm.closed:
                comm = self._communicators[key] = self.make_communicator(nodes, checked)
            return comm

    def communicators(self) -> list[RingCommunicator]:
        """The communicators kept now."""
        with self._lock:
            return list(self._communicators.values())

    def run(self, name: str, buffers: list, op: str | None, options: dict) -> None:
        """An in-place, synchronous call: checked, then run on the kept communicator."""
        self.execute(self.check_call(name, buffers, op, options), options)

    def execute(self, call: Call, options: dict) -> Work | None:
        """``call`` on the kept communicator of ``options``; what it returns (a handle of
        a call queued on a device, gpu)."""
        while True:
            comm = self.communicator(call.nodes, options)
            try:
                return comm.execute(call)
            except CommunicatorClosedError:
                # Closed by another thread's failed or interrupted call before this call
                # started any work: a new communicator is made.
                continue

    def check_async(self) -> None:
        """Refuse ``async_op=True`` where this backend cannot run it (mpi: the thread level)."""

    def all_ranks_ok(self, comm: RingCommunicator, ok: bool) -> bool:
        """Whether ``ok`` holds on every rank (one process: ``ok``)."""
        return ok

    def queued_call(self, call: Call, send: list | None, async_op: bool) -> Call:
        """``call`` out of place from ``send`` and/or returning a handle, queued on its
        devices (only where :attr:`queues_on_devices`)."""
        raise NotImplementedError

    def checked_buffers(self, buffers: Sequence) -> list:
        """One snapshot of the caller's list, checked to be one: another thread that
        changes the list meanwhile cannot swap in a buffer that was never checked."""
        if type(buffers) is not list:
            check_buffer_list(buffers)
        return list(buffers)

    def close(self) -> None:
        """Close every kept communicator."""
        with self._lock:
            for comm in self._communicators.values():
                comm.close()
            self._communicators.clear()

    def after_fork(self) -> None:
        """In the child of a ``fork()``: a new lock.  The communicators stay: each mends
        itself (ring.communicator.track)."""
        self._lock = threading.Lock()


_backends: dict[str, Backend] = {}
_registry_lock = threading.Lock()


def register(name: str, where: str) -> None:
    """Register the backend ``name``, implemented by ``where`` ("module:Class")."""
    with _registry_lock:
        REGISTERED[name] = where
        _backends.pop(name, None)


def backend(name: object) -> Backend:
    """The backend registered as ``name`` (made on first use)."""
    found = _backends.get(name) if isinstance(name, str) else None
    if found is not None:
        return found
    if not isinstance(name, str) or name not in REGISTERED:
        raise ValueError(f"unknown backend {name!r}: expected one of {', '.join(REGISTERED)}")
    module, cls = REGISTERED[name].split(":")
    made = getattr(importlib.import_module(module), cls)()
    with _registry_lock:
        return _backends.setdefault(name, made)


def close_all() -> None:
    """Close every backend's kept communicators (at exit)."""
    for made in list(_backends.values()):
        made.close()


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for made in _backends.values():
        made.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
