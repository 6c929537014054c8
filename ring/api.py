"""The public collectives: ``ring.allreduce``, ``ring.reduce_scatter``, ``ring.all_gather``.

Each takes a list of N one-dimensional contiguous arrays, one per logical node, and works
in place.  ``backend`` picks the executor of the one ring schedule:

* ``"cpu"``: threads over NumPy arrays (:mod:`ring.cpu`); option ``sync``.
* ``"gpu"``: CuPy arrays, one device per node (:mod:`ring.gpu`); per call ``stream=``
  (one CuPy stream, or one per node): ordered on the caller's stream(s), as NCCL's
  ``stream`` argument, instead of blocking the host (:mod:`ring.gpu.caller`).
* ``"mpi"``: one buffer per MPI rank (:mod:`ring.mpi`); option ``comm``.

Every call is dispatched to its backend's :class:`ring.communicator.Backend`, found by name
(:func:`ring.communicator.registered`): an in-place call to its
:meth:`~ring.communicator.Backend.run`, the others checked here first.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Sequence
from typing import Any

from .communicator import (
    BACKENDS,
    Backend,
    Call,
    RingCommunicator,
    check_buffer_list,
    close_all,
    copy_in,
    flattened,
    normalized_op,
    registered,
)
from .place import Refused, check_send
from .work import PENDING, Work, submit

__all__ = [
    "BACKENDS",
    "all_gather",
    "allreduce",
    "get_communicator",
    "reduce_scatter",
]


def get_communicator(nodes: int, *, backend: str = "cpu", **options) -> RingCommunicator:
    """A cached, open communicator for ``nodes`` nodes (a new one if the last was closed).

    A backend whose per-call options go with each call instead of its communicator
    (mpi: every rank must reach the same cached ring) refuses them here: the ring returned
    would not run by them."""
    found = registered(backend)
    per_call = [name for name in found.per_call_options if name in options]
    if per_call:
        made = found.made_with_per_call_options
        yourself = f", or make a communicator with them yourself ({made})" if made else ""
        raise TypeError(
            f"{', '.join(per_call)}: option(s) of each call on backend {backend!r}, not of "
            f"its cached communicator: pass them with the call (ring.allreduce(buffers, "
            f"backend={backend!r}, {per_call[0]}=...)){yourself.format(per_call[0])}"
        )
    return found.communicator(nodes, options)


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
    return _collective("allreduce", buffers, op, backend, recv, async_op, options)


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
    return _collective("reduce_scatter", buffers, op, backend, recv, async_op, options)


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
    return _collective("all_gather", buffers, None, backend, recv, async_op, options)


# Backend name -> its backend's run, as registered: a module call looks it up once per name.
_runs: dict[str, Callable[[str, Any, Any, dict], None]] = {}


def _collective(name: str, buffers, op, backend: str, recv, async_op, options: dict) -> Work | None:
    """Collective ``name``: in place and synchronous, straight to its backend's
    :meth:`~ring.communicator.Backend.run`; else :func:`_call`."""
    if recv is None and not async_op and backend not in PENDING:
        run = _runs.get(backend)
        if run is None:
            run = _runs[backend] = registered(backend).run
        run(name, buffers, op, options)
        return None
    return _call(name, buffers, op, backend, options, recv, async_op)


def _call(name: str, buffers, op, backend: str, options: dict, recv, async_op) -> Work | None:
    """A call out of place, asynchronous, or behind asynchronous ones: checked here, in
    the caller, before anything is copied or queued."""
    found = registered(backend)
    if not isinstance(async_op, bool):
        raise TypeError(f"async_op must be True or False, got {async_op!r}")
    if found.queues_on_devices:
        return _queued(found, name, buffers, op, options, recv, async_op)
    if async_op:
        found.check_async()
    op = normalized_op(op)
    together = found.ranks_check_together
    send = None
    if recv is not None:
        target: list | Refused
        try:
            target = _recv_checked(found, name, recv, op, options)[0]
            send = check_send(buffers, target)
        except (TypeError, ValueError) as exc:
            if not together:
                raise
            target = Refused(exc)  # raised on every rank, from the call's pre-flight
        buffers = target
    elif async_op:
        buffers = flattened(found.checked_buffers(buffers))
        found.check_call(name, buffers, op, options)

    def run() -> None:
        if together and recv is not None:
            # Every rank's send checked before any rank copies: one refused, and every
            # rank joins the call with its recv untouched, for the pre-flight to refuse.
            call = found.check_call(name, buffers, op, options)
            comm = found.communicator(call.nodes, options)
            if not found.all_ranks_ok(comm, send is not None):
                comm.execute(call)
                return
        if send is not None:
            copy_in(send, buffers)
        found.run(name, buffers, op, options)

    if async_op:
        return submit(backend, run)
    if PENDING.get(backend):
        submit(backend, run).wait()  # in order behind the calls still queued
    else:
        run()
    return None


def _queued(
    found: Backend, name: str, buffers, op, options: dict, recv, async_op: bool
) -> Work | None:
    """A call out of place or asynchronous on a backend that queues both on its devices'
    streams itself (gpu: ``recv``'s copies and the call on the call's streams, the handle
    on its done event): checked as :func:`_call` checks, run in the caller, no thread."""
    send = None
    if recv is not None:
        target, call = _recv_checked(found, name, recv, op, options)
        send = check_send(buffers, target)
    else:
        call = found.check_call(name, found.checked_buffers(buffers), op, options)
    return found.execute(found.queued_call(call, send, async_op), options)


def _recv_checked(found: Backend, name: str, recv, op, options: dict) -> tuple[list, Call]:
    """``recv`` as one flat snapshot, and the call on it as its backend checks it: recv is
    the call's buffers, so a refusal names ``buffers[i]``; its note says they are recv's."""
    try:
        check_buffer_list(recv)
        target = flattened(list(recv))
        return target, found.check_call(name, target, op, options)
    except (TypeError, ValueError) as exc:
        exc.add_note("(recv was checked as the call's buffers: buffers[i] above is recv[i])")
        raise


atexit.register(close_all)
