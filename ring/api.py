"""The public collectives: ``ring.allreduce``, ``ring.reduce_scatter``, ``ring.all_gather``.

Each takes a list of N one-dimensional contiguous arrays, one per logical node, and works
in place.  ``backend`` picks the executor of the one ring schedule:

* ``"cpu"``: threads over NumPy arrays (:mod:`ring.cpu`); option ``sync``.
* ``"gpu"``: CuPy arrays, one device per node (:mod:`ring.gpu`).
* ``"mpi"``: one buffer per MPI rank (:mod:`ring.mpi`); option ``comm``.
"""

from __future__ import annotations

import atexit
import importlib
import threading
from collections.abc import Sequence

from .communicator import CommunicatorClosedError
from .cpu import CpuCommunicator, check_sync, prepare_call

__all__ = ["BACKENDS", "all_gather", "allreduce", "get_communicator", "reduce_scatter"]

# backend name -> (module, factory returning a communicator for (nodes, **options)).
BACKENDS = {
    "cpu": "ring.cpu",
    "gpu": "ring.gpu",
    "mpi": "ring.mpi",
}

_cache: dict[tuple, object] = {}
_cache_lock = threading.Lock()


def _check_backend(backend: str) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    return backend


def get_communicator(nodes: int, *, backend: str = "cpu", **options):
    """A cached, open communicator for ``nodes`` nodes (a new one if the last was closed)."""
    _check_backend(backend)
    if backend == "cpu":
        unknown = set(options) - {"sync"}
        if unknown:
            raise TypeError(f"unknown option(s) for backend 'cpu': {', '.join(sorted(unknown))}")
        key = ("cpu", nodes, check_sync(options.get("sync", "pairwise")))
        factory = lambda: CpuCommunicator(nodes, **options)  # noqa: E731
    else:
        module = importlib.import_module(BACKENDS[backend])
        key = module.cache_key(nodes, **options)
        factory = lambda: module.make_communicator(nodes, **options)  # noqa: E731
    with _cache_lock:
        comm = _cache.get(key)
        if comm is None or comm.closed:
            comm = _cache[key] = factory()
        return comm


def _run(name: str, buffers: Sequence, op, backend: str, options: dict) -> None:
    _check_backend(backend)
    if backend == "cpu":
        # Validate before get_communicator, which may start threads.
        check_sync(options.get("sync", "pairwise"))
        ufunc, count = prepare_call(name, buffers, op)
        while True:
            comm = get_communicator(len(buffers), backend=backend, **options)
            try:
                comm._execute(name, buffers, ufunc, count)
                return
            except CommunicatorClosedError:
                # Closed by another thread's failed or interrupted call before this call
                # started any work: the cache now hands out a new communicator.
                continue
    if backend == "mpi":
        # One buffer per rank: ring.mpi checks what every rank passed on all ranks together,
        # so one rank's mistake raises everywhere instead of leaving the others waiting.
        nodes = 1
    else:
        if isinstance(buffers, (str, bytes)) or not isinstance(buffers, Sequence):
            raise TypeError(
                f"buffers must be a list of arrays, one per node, got {type(buffers).__name__}"
            )
        if len(buffers) == 0:
            raise ValueError("buffers is empty: pass one array per node")
        nodes = len(buffers)
    comm = get_communicator(nodes, backend=backend, **options)
    if backend == "mpi":
        comm._collective(name, buffers, op, segment_bytes=options.get("segment_bytes"))
    elif name == "all_gather":
        comm.all_gather(buffers)
    else:
        getattr(comm, name)(buffers, op)


def allreduce(buffers: Sequence, op: str = "sum", *, backend: str = "cpu", **options) -> None:
    """Reduce the N buffers element-wise with ``op``; every buffer ends with the result."""
    _run("allreduce", buffers, op, backend, options)


def reduce_scatter(buffers: Sequence, op: str = "sum", *, backend: str = "cpu", **options) -> None:
    """Afterwards node ``i`` holds chunk ``owned_chunk(i, N)`` fully reduced; the other
    chunks hold partial results."""
    _run("reduce_scatter", buffers, op, backend, options)


def all_gather(buffers: Sequence, *, backend: str = "cpu", **options) -> None:
    """Copy chunk ``owned_chunk(i, N)`` of every node ``i`` to all nodes (no reduction)."""
    _run("all_gather", buffers, None, backend, options)


@atexit.register
def _close_cached() -> None:
    with _cache_lock:
        for comm in _cache.values():
            comm.close()
        _cache.clear()
