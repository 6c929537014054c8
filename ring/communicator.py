"""What every backend's communicator offers, whatever executes the schedule.

A backend (:class:`Backend`, one class per backend, the contract :mod:`ring.api` dispatches
through) checks a call before a
communicator exists and makes its communicators; every communicator offers
:meth:`RingCommunicator.execute`, which runs a :class:`Call` and raises
:class:`CommunicatorClosedError` only before any of its work started, so a caller can retry
on a fresh communicator; it turns ``algorithm="auto"`` into the algorithm to run with
:func:`resolve_algorithm` (a decision table, :mod:`ring.auto`) once the size of the call is
known.

Every backend checks a call's buffers the same way before any data moves
(:func:`check_buffer_list`, :func:`validate_buffers`): a list, one one-dimensional,
contiguous, writeable array per node, all of one length and dtype, no two sharing memory.

A child of ``fork()`` has one thread, its parent's memory, and none of its parent's other
threads, so every communicator the parent made (:func:`track`) is mended in the child
before it runs (``os.register_at_fork``): the cpu backend's make worker threads of their
own on their first call that needs them; a backend that cannot cross ``fork()`` (MPI, CUDA)
refuses every call in the child with one line (:meth:`RingCommunicator._after_fork_in_child`).
"""

from __future__ import annotations

import importlib
import itertools
import os
import threading
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .ops import OPS, check_dtype, op_name
from .schedule import check_collective

if TYPE_CHECKING:
    from .work import Work

__all__ = [
    "BACKENDS",
    "MAX_NODES",
    "Backend",
    "Call",
    "CommunicatorClosedError",
    "RingCommunicator",
    "check_buffer_list",
    "check_nodes",
    "close_all",
    "copy_in",
    "flattened",
    "may_share",
    "normalized_op",
    "registered",
    "track",
    "validate_buffers",
]

MAX_NODES = 1024


class CommunicatorClosedError(RuntimeError):
    """Raised when a closed communicator is asked to run a collective."""


def flattened(buffers):
    """``buffers`` with each C-contiguous array of more than one dimension as its 1-D view
    (``reshape(-1)``: the same memory, reduced in memory order, in place); the list itself
    when every buffer is 1-D already, so a repeated call keeps its buffer objects.  Anything
    else is left for the buffer checks to refuse."""
    if type(buffers) is not list:
        return buffers
    for buf in buffers:
        if getattr(buf, "ndim", 1) != 1:
            break
    else:
        return buffers
    return [_flat(buf) for buf in buffers]


def _flat(buf):
    flags = getattr(buf, "flags", None)
    if getattr(buf, "ndim", 1) == 1 or flags is None or not flags.c_contiguous:
        return buf
    return buf.reshape(-1)


def copy_in(send: list, recv: list) -> None:
    """Each node's input into its output (the flat views the backends run on): the copy
    an out-of-place call (:mod:`ring.place`) makes before the in-place one."""
    for mine, out in zip(send, flattened(recv), strict=True):
        if mine is not out:
            out[...] = mine.reshape(-1)


def normalized_op(op):
    """``op`` as :data:`ring.ops.OPS` names it (:func:`ring.ops.op_name`: any case, a
    ufunc), a name already canonical at the cost of one look-up.  Never raises: an op it
    does not know is returned as given, for the call's own checks to refuse (under MPI,
    on every rank together)."""
    if op is None or (op.__class__ is str and op in OPS):
        return op
    try:
        return op_name(op)
    except ValueError:
        return op


def check_nodes(nodes: object) -> int:
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)):
        raise TypeError(f"nodes must be an integer, got {type(nodes).__name__}")
    if not 1 <= nodes <= MAX_NODES:
        raise ValueError(f"nodes must be in [1, {MAX_NODES}], got {nodes}")
    return int(nodes)


# Options only the GPU backend's calls take (ring.gpu.caller).
GPU_CALL_OPTIONS = ("stream",)


def refuse_gpu_options(backend: str, unknown: set) -> None:
    """One line for a GPU call's option given to another backend (a TypeError): the
    backends' own option checks call it before they list the options they know."""
    named = sorted(unknown & set(GPU_CALL_OPTIONS))
    if named:
        raise TypeError(
            f"{named[0]}= orders a call on CUDA streams: only backend='gpu' takes it, "
            f"not backend {backend!r} (whose calls return once done, or with async_op=True "
            "a handle to wait on)"
        )


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
    # Why a communicator of this backend made before a fork() cannot run in its child.
    _fork_refusal = "it cannot be used across fork()"
    _forked_from: int | None = None  # the process that made it, once refused in a child

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

    def unbind(self) -> None:
        """Let go of the buffers of the calls this communicator last ran.

        A backend that binds a repeated call to its buffers (cpu, mpi) keeps views of the
        last call's buffers per collective and options, so that the same call again skips
        its checks; those views keep the buffers' memory alive after the caller drops
        them.  Call this (or :meth:`close`) to free it; the next call binds again."""

    def execute(self, call: Call) -> Work | None:
        """Run a call its backend's ``check_call`` accepted; a handle only for a call
        its backend queues on a device to return later (gpu ``async_op``)."""
        raise NotImplementedError

    def _collective(self, name: str, buffers: Sequence, op: str | None) -> None:
        raise NotImplementedError

    def _closed_error(self) -> CommunicatorClosedError:
        """What a call on this closed communicator raises: closed, or made before a fork
        by the process that forked this one."""
        if self._forked_from is not None:
            return CommunicatorClosedError(
                f"{self!r} was made by process {self._forked_from}, which forked this one: "
                f"{self._fork_refusal}"
            )
        return CommunicatorClosedError(f"{self!r} is closed: create a new communicator")

    def _after_fork_in_child(self) -> None:
        """In the child of a ``fork()``: refuse every call (:meth:`_closed_error`), and
        never touch what the parent holds, closing included.  A backend that can run in
        the child mends itself instead."""
        if not self._closed:
            self._forked_from = os.getppid()
            self._closed = True

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


# Backend name -> the module whose Backend it is, imported on first use, so the optional
# packages of the others stay optional.
BACKENDS = {"cpu": "ring.cpu.backend", "gpu": "ring.gpu.backend", "mpi": "ring.mpi.backend"}


class Backend:
    """One backend's side of every collective (a subclass per backend, registered under
    its ``name`` as it is defined); :mod:`ring.api` dispatches every call to one.

    It checks a call's options once into a frozen, typed options object of its own
    (:meth:`options`), the key of the communicator it keeps for them
    (:meth:`communicator`); checks a call before a communicator is made
    (:meth:`check_call`); and runs an in-place call (:meth:`run`: the cpu's keeps the call
    bound to its buffers, so a repeated module call costs what a held communicator's
    does).  What it can do beyond that it says in class attributes, never by what its
    module happens to define."""

    classes: ClassVar[dict[str, type[Backend]]] = {}

    name: ClassVar[str]
    # Options of each call, not of its communicator: get_communicator refuses them.
    per_call_options: ClassVar[tuple[str, ...]] = ()
    # A refused out-of-place argument is raised inside the call, on every rank together.
    ranks_check_together: ClassVar[bool] = False
    # How a user makes a communicator that takes a per-call option as its own ("{}": the
    # option's name), where one can.
    made_with_per_call_options: ClassVar[str] = ""
    # recv= and async_op=True are queued on the call's device streams (queued_call).
    queues_on_devices: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        Backend.classes[cls.name] = cls

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


def registered(name: object) -> Backend:
    """The backend registered as ``name`` (made on first use)."""
    found = _backends.get(name) if isinstance(name, str) else None
    if found is not None:
        return found
    if not isinstance(name, str) or name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: expected one of {', '.join(BACKENDS)}")
    importlib.import_module(BACKENDS[name])
    with _registry_lock:
        return _backends.setdefault(name, Backend.classes[name]())


def close_all() -> None:
    """Close every backend's kept communicators (at exit)."""
    for made in list(_backends.values()):
        made.close()


# Every communicator made in this process and not yet collected: the child of a fork()
# mends them (_after_fork_in_child).
_live: weakref.WeakSet[RingCommunicator] = weakref.WeakSet()


def track(comm: RingCommunicator) -> None:
    """Count ``comm`` among the communicators a fork's child mends (its backend's
    constructor calls this)."""
    _live.add(comm)


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for made in _backends.values():
        made.after_fork()
    for comm in list(_live):
        comm._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def validate_buffers(
    buffers: Sequence, *, array_type: type[Any] = np.ndarray, kind: str = "NumPy"
) -> tuple[int, np.dtype]:
    """Return ``(count, dtype)`` of a list of per-node buffers, or raise.

    Every buffer must be a one-dimensional, C-contiguous, writeable ``array_type`` of the
    same length and dtype, and no two may share memory (each node owns its buffer).
    """
    if isinstance(buffers, (str, bytes)) or not isinstance(buffers, Sequence):
        raise TypeError(
            f"buffers must be a list of {kind} arrays, one per node, got {type(buffers).__name__}"
        )
    if len(buffers) == 0:
        raise ValueError("buffers is empty: pass one array per node")
    first: Any = buffers[0]
    for i, buf in enumerate(buffers):
        if not isinstance(buf, array_type):
            raise TypeError(
                f"buffers[{i}] must be a {kind} array ({array_type.__module__}."
                f"{array_type.__name__}), got {type(buf).__name__}"
            )
        if buf.ndim != 1:
            raise ValueError(
                f"buffers[{i}] has shape {buf.shape} and is not C-contiguous: pass a "
                "contiguous array (of any shape) or a one-dimensional one"
            )
        if not buf.flags.c_contiguous:
            raise ValueError(f"buffers[{i}] is not contiguous: pass a contiguous array")
        if not getattr(buf.flags, "writeable", True):
            raise ValueError(f"buffers[{i}] is read-only: the collective writes in place")
        if buf.dtype != first.dtype:
            raise TypeError(
                f"buffers[{i}] has dtype {buf.dtype} but buffers[0] has {first.dtype}: "
                "all nodes must use one dtype"
            )
        if buf.shape[0] != first.shape[0]:
            raise ValueError(
                f"buffers[{i}] has {buf.shape[0]} elements but buffers[0] has "
                f"{first.shape[0]}: all nodes must hold the same number of elements"
            )
    check_dtype(first.dtype)
    _check_disjoint(buffers)
    return first.shape[0], first.dtype


def _check_disjoint(buffers: Sequence) -> None:
    if len(buffers) < 2 or buffers[0].nbytes == 0:
        return
    if len(buffers) <= 16:
        # may_share_memory is a cheap bounds check (0.2 us); fine for few pairs.
        pairs = (
            (a, b)
            for a in range(len(buffers))
            for b in range(a + 1, len(buffers))
            if may_share(buffers[a], buffers[b])
        )
    else:
        # Sort by start address so only neighbours need comparing.
        spans = sorted((_address(buf), i) for i, buf in enumerate(buffers))
        nbytes = buffers[0].nbytes
        pairs = (
            (min(a, b), max(a, b))
            for (start_a, a), (start_b, b) in itertools.pairwise(spans)
            if start_a + nbytes > start_b
        )
    for a, b in pairs:
        raise ValueError(
            f"buffers[{a}] and buffers[{b}] share memory: each node needs its own buffer"
        )


def _address(buf) -> int:
    data = buf.data
    return data.ptr if hasattr(data, "ptr") else buf.ctypes.data


def may_share(a, b) -> bool:
    """Whether two arrays' spans of memory may meet: NumPy's bounds check for two NumPy
    arrays, else their pointers and byte lengths (CuPy's, any array's)."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    start_a, start_b = _address(a), _address(b)
    return start_a < start_b + b.nbytes and start_b < start_a + a.nbytes
