"""The public collectives: ``ring.allreduce``, ``ring.reduce_scatter``, ``ring.all_gather``.

Each takes a list of N one-dimensional contiguous arrays, one per logical node, and works
in place.  ``backend`` picks the executor of the one ring schedule:

* ``"cpu"``: threads over NumPy arrays (:mod:`ring.cpu`); option ``sync``.
* ``"gpu"``: CuPy arrays, one device per node (:mod:`ring.gpu`); per call ``stream=``
  (one CuPy stream, or one per node): ordered on the caller's stream(s), as NCCL's
  ``stream`` argument, instead of blocking the host (:mod:`ring.gpu.caller`).
* ``"mpi"``: one buffer per MPI rank (:mod:`ring.mpi`); option ``comm``.
"""

from __future__ import annotations

import atexit
import importlib
import os
import threading
from collections.abc import Sequence

from .communicator import (
    CommunicatorClosedError,
    RingCommunicator,
    check_buffer_list,
    copy_in,
    flattened,
    normalized_op,
)
from .place import Refused, check_send
from .work import PENDING, Work, submit

__all__ = ["BACKENDS", "all_gather", "allreduce", "get_communicator", "reduce_scatter"]

# backend name -> the module that gives check_call, cache_key and make_communicator (see
# ring.communicator); imported on first use, so optional packages stay optional.
BACKENDS = {
    "cpu": "ring.cpu",
    "gpu": "ring.gpu",
    "mpi": "ring.mpi",
}

_cache: dict[tuple, RingCommunicator] = {}
_cache_lock = threading.Lock()


def _backend(backend: str):
    module = _modules.get(backend) if isinstance(backend, str) else None
    if module is None:
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
        module = _modules[backend] = importlib.import_module(BACKENDS[backend])
    return module


_modules: dict[str, object] = {}


def get_communicator(nodes: int, *, backend: str = "cpu", **options) -> RingCommunicator:
    """A cached, open communicator for ``nodes`` nodes (a new one if the last was closed).

    A backend whose ``PER_CALL_OPTIONS`` go with each call instead of its communicator
    (mpi: every rank must reach the same cached ring) refuses them here: the ring returned
    would not run by them."""
    module = _backend(backend)
    per_call = [name for name in getattr(module, "PER_CALL_OPTIONS", ()) if name in options]
    if per_call:
        yourself = (
            f", or make a communicator with them yourself (ring.mpi.MpiRing(comm, "
            f"{per_call[0]}=...))"
            if backend == "mpi"
            else ""
        )
        raise TypeError(
            f"{', '.join(per_call)}: option(s) of each call on backend {backend!r}, not of "
            f"its cached communicator: pass them with the call (ring.allreduce(buffers, "
            f"backend={backend!r}, {per_call[0]}=...)){yourself}"
        )
    return _cached(module, nodes, options)


def _cached(module, nodes: int, options: dict) -> RingCommunicator:
    key = module.cache_key(nodes, **options)
    with _cache_lock:
        comm = _cache.get(key)
        if comm is None or comm.closed:
            comm = _cache[key] = module.make_communicator(nodes, **options)
        return comm


def _run(name: str, buffers: Sequence, op, backend: str, options: dict) -> Work | None:
    # Checked before _cached, which may start threads or make an MPI communicator.
    module = _backend(backend)
    # Validated and run from one snapshot of the list: another thread that changes the
    # caller's list meanwhile cannot swap in a buffer that was never checked.
    if type(buffers) is not list:
        check_buffer_list(buffers)
    snapshot = list(buffers)
    if getattr(module, "CALLS_TAKE_OPTIONS", False):
        # Another spelling of the op, or n-D arrays, miss the bound call: its full path
        # takes them (ring.cpu), so a repeated plain call pays nothing for them.  The other
        # backends take them in check_call (gpu) or in the call, on every rank (mpi).
        _run_direct(module, name, snapshot, op, backend, options)
        return None
    return _execute(module, module.check_call(name, snapshot, op, **options), options)


def _execute(module, call, options: dict) -> Work | None:
    """``call`` on the cached communicator of ``options``; what it returns (a handle of a
    call queued on a device, gpu)."""
    while True:
        comm = _cached(module, call.nodes, options)
        try:
            return comm.execute(call)
        except CommunicatorClosedError:
            # Closed by another thread's failed or interrupted call before this call
            # started any work: the cache now hands out a new communicator.
            continue


# (collective, backend, N, the options as the caller wrote them) -> the communicator calls
# of those options run on, the key its bound calls are kept under, and the options' types
# where one is not a str: a repeated module call goes straight to it (_took_given), a good
# part of a 1 KiB call's few µs.  A dict finds an equal key, so 4096.0 or True finds the
# entry of 4096 or 1: the types tell them apart, for the full checks to refuse.
_direct: dict[tuple, tuple[RingCommunicator, object, tuple | None]] = {}


# collective -> (backend, N, options, its _direct entry) of its last module call that found
# one: the same call again compares dicts instead of building and hashing a key (0.1 µs of
# a 1 KiB call).  Equal options find the entry, whose types then tell 4096.0 from 4096.
_last: dict[str, tuple] = {}


def _run_direct(module, name: str, buffers: list, op, backend: str, options: dict) -> None:
    """A call on a backend whose communicators take each call's options (cpu): it runs as
    a held communicator's call does, bound when it repeats on the same buffers, so the
    module function costs what the communicator does.  The first call of its options (or
    the first after its communicator closed) is checked in full before one is made."""
    while not _took_given(name, buffers, op, backend, options):
        module.check_call(name, buffers, op, **options)
        # One communicator per sync for every option set: the rest go with each call, so
        # none of one call's options becomes a default of the next.
        sync = {"sync": options["sync"]} if "sync" in options else {}
        given = tuple(options.items())
        types = tuple(map(type, options.values()))
        _direct[(name, backend, len(buffers), *given)] = (
            _cached(module, len(buffers), sync),
            (name, *given) if given else name,
            None if all(kind is str for kind in types) else types,
        )
        _last.pop(name, None)  # it may hold the entry just replaced


def allreduce(
    buffers: Sequence,
    op: str = "sum",
    *,
    backend: str = "cpu",
    recv: Sequence | None = None,
    async_op: bool = False,
    **options,
) -> Work | None:
    """Reduce the N buffers element-wise with ``op`` (sum, prod, max, min, or avg: the
    sum divided by N, see :mod:`ring.ops`; any case, ``ring.ReduceOp.SUM`` or ``np.add``
    too); every buffer ends with the result.  ``recv``: write the result there instead,
    leaving ``buffers`` as they were (:mod:`ring.place`).  ``async_op=True``: return a
    :class:`ring.work.Work` at once, to ``wait()`` on (:mod:`ring.work`; on the gpu no
    thread: the call is queued on the current or given streams and the handle waits for
    its done event, ``recv``'s copies queued before it, :mod:`ring.gpu.caller`).
    ``stream=`` (gpu only): one CuPy stream or one per node; the call runs after the
    work queued on them, later work on them runs after it, and the host does not wait."""
    if recv is None and not async_op and not PENDING.get(backend):
        if not _took_given("allreduce", buffers, op, backend, options):
            _run("allreduce", buffers, op, backend, options)
        return None
    return _call("allreduce", buffers, op, backend, options, recv, async_op)


def reduce_scatter(
    buffers: Sequence,
    op: str = "sum",
    *,
    backend: str = "cpu",
    recv: Sequence | None = None,
    async_op: bool = False,
    **options,
) -> Work | None:
    """Afterwards node ``i`` holds chunk ``owned_chunk(i, N)`` fully reduced; the other
    chunks hold partial results.  ``recv``, ``async_op`` and ``stream`` (gpu) as for
    :func:`allreduce`."""
    if recv is None and not async_op and not PENDING.get(backend):
        if not _took_given("reduce_scatter", buffers, op, backend, options):
            _run("reduce_scatter", buffers, op, backend, options)
        return None
    return _call("reduce_scatter", buffers, op, backend, options, recv, async_op)


def all_gather(
    buffers: Sequence,
    *,
    backend: str = "cpu",
    recv: Sequence | None = None,
    async_op: bool = False,
    **options,
) -> Work | None:
    """Copy chunk ``owned_chunk(i, N)`` of every node ``i`` to all nodes (no reduction).
    ``recv``, ``async_op`` and ``stream`` (gpu) as for :func:`allreduce`."""
    if recv is None and not async_op and not PENDING.get(backend):
        if not _took_given("all_gather", buffers, None, backend, options):
            _run("all_gather", buffers, None, backend, options)
        return None
    return _call("all_gather", buffers, None, backend, options, recv, async_op)


def _took_given(name: str, buffers, op, backend: str, options: dict) -> bool:
    """Run a call on the communicator calls of the same options ran on before, if there is
    one (a list of as many buffers, open): its own bound or full path checks the call
    (ring.cpu).  False when there is none, or it closed before the call started any work,
    for :func:`_run_direct` to make one."""
    if type(buffers) is not list:
        return False
    last = _last.get(name)
    try:
        if (
            last is not None
            and last[0] == backend
            and last[1] == len(buffers)
            and last[2] == options
        ):
            entry = last[3]
        else:
            entry = _direct.get((name, backend, len(buffers), *options.items()))
            if entry is not None:
                _last[name] = (backend, len(buffers), options, entry)
    except (TypeError, ValueError):  # an option of no plain type: the full checks refuse it
        return False
    if entry is None or entry[0]._closed:
        return False
    comm, key, types = entry
    if types is not None and types != tuple(map(type, options.values())):
        return False
    try:
        comm._keyed(key, name, buffers, op, options)
    except CommunicatorClosedError:
        return False
    return True


def _call(name: str, buffers, op, backend: str, options: dict, recv, async_op) -> Work | None:
    """A call out of place, asynchronous, or behind asynchronous ones: checked here, in
    the caller, before anything is copied or queued."""
    module = _backend(backend)
    if not isinstance(async_op, bool):
        raise TypeError(f"async_op must be True or False, got {async_op!r}")
    if hasattr(module, "queued_call"):
        return _queued(module, name, buffers, op, options, recv, async_op)
    if async_op:
        getattr(module, "check_async", lambda: None)()  # mpi: the thread level it needs
    op = normalized_op(op)
    together = getattr(module, "RANKS_CHECK_TOGETHER", False)  # mpi
    send = None
    if recv is not None:
        target: list | Refused
        try:
            target = _recv_checked(module, name, recv, op, options)[0]
            send = check_send(buffers, target)
        except (TypeError, ValueError) as exc:
            if not together:
                raise
            target = Refused(exc)  # raised on every rank, from the call's pre-flight
        buffers = target
    elif async_op:
        if type(buffers) is not list:
            check_buffer_list(buffers)
        buffers = flattened(list(buffers))
        module.check_call(name, buffers, op, **options)

    def run() -> None:
        if together and recv is not None:
            # Every rank's send checked before any rank copies: one refused, and every
            # rank joins the call with its recv untouched, for the pre-flight to refuse.
            call = module.check_call(name, buffers, op, **options)
            comm = _cached(module, call.nodes, options)
            if not module.all_ranks_ok(comm, send is not None):
                comm.execute(call)
                return
        if send is not None:
            copy_in(send, buffers)
        _run(name, buffers, op, backend, options)

    if async_op:
        return submit(backend, run)
    if PENDING.get(backend):
        submit(backend, run).wait()  # in order behind the calls still queued
    else:
        run()
    return None


def _queued(module, name: str, buffers, op, options: dict, recv, async_op: bool) -> Work | None:
    """A call out of place or asynchronous on a backend that queues both on its devices'
    streams itself (gpu: ``recv``'s copies and the call on the call's streams, the handle
    on its done event): checked as :func:`_call` checks, run in the caller, no thread."""
    send = None
    if recv is not None:
        target, call = _recv_checked(module, name, recv, op, options)
        send = check_send(buffers, target)
    else:
        if type(buffers) is not list:
            check_buffer_list(buffers)
        call = module.check_call(name, list(buffers), op, **options)
    return _execute(module, module.queued_call(call, send, async_op), options)


def _recv_checked(module, name: str, recv, op, options: dict) -> tuple[list, object]:
    """``recv`` as one flat snapshot, and the call on it as its backend checks it: recv is
    the call's buffers, so a refusal names ``buffers[i]``; its note says they are recv's."""
    try:
        check_buffer_list(recv)
        target = flattened(list(recv))
        return target, module.check_call(name, target, op, **options)
    except (TypeError, ValueError) as exc:
        exc.add_note("(recv was checked as the call's buffers: buffers[i] above is recv[i])")
        raise


def _after_fork_in_child() -> None:
    """A lock another thread held at the fork would stay held in the child.  The cached
    communicators stay: each mends itself (ring.communicator.track)."""
    global _cache_lock
    _cache_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_cached() -> None:
    with _cache_lock:
        for comm in _cache.values():
            comm.close()
        _cache.clear()
        _direct.clear()
        _last.clear()
