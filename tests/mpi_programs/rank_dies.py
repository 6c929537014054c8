"""Run under ``mpirun -n N``: one rank stops mid-collective; the job must end, not hang.

``python rank_dies.py exit``: rank 1 exits (no MPI_Finalize) inside its first reduction.
``python rank_dies.py raise``: rank 1's reduction raises; the backend aborts the job.
``python rank_dies.py raise-bound``: the same in a repeated call, bound to its buffer
(:mod:`ring.mpi.bound`), which runs the ufunc it was bound with.
``python rank_dies.py raise-shared``: the same in a call on shared buffers, where the
peers wait at its closing barrier.
``python rank_dies.py interrupt``: rank 1 gets a real SIGINT (Ctrl-C) as its pre-flight
exchange returns, when the peers already go on to move data; the backend aborts the job.
``python rank_dies.py interrupt-shared``: rank 1 gets a real SIGINT between the exchanges of
a shared allocation (:meth:`ring.mpi.MpiRing.shared_buffer`); the backend aborts the job.
``python rank_dies.py hang SECONDS``: rank 1 never joins; a
:class:`ring.bench.watchdog.Watchdog` of SECONDS on every rank aborts the job with its message.
Rank 0 prints ``finished`` only if its collective returned, which must not happen.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

import ring.ops
from ring.bench.watchdog import Watchdog
from ring.mpi import MpiRing

world = MPI.COMM_WORLD
rank = world.Get_rank()
mode = sys.argv[1]


armed = mode != "raise-bound"  # raise-bound: failing_add fails from the second call on


def failing_add(a, b, out):
    if rank == 1 and armed:
        if mode == "exit":
            os._exit(3)
        raise FloatingPointError("injected failure in rank 1's reduction")
    return np.add(a, b, out=out)


comm = MpiRing(world)
buf = np.ones(1000, dtype=np.float64)
comm.allreduce([buf])  # a healthy call first: the ring itself works
if mode in ("exit", "raise"):
    ring.ops.OPS["sum"] = failing_add
    comm.allreduce([buf.copy()])  # a new buffer: a full call, which reads OPS
elif mode == "raise-bound":
    ring.ops.OPS["sum"] = failing_add
    other = buf.copy()
    comm.allreduce([other])  # a full call, bound to other with failing_add
    assert comm._bound["allreduce"].buf is other  # the next call takes the bound path
    armed = True
    comm.allreduce([other])
elif mode == "raise-shared":  # by position on memory every rank maps (ring.mpi.shared)
    shared = comm.shared_buffer(100_000, np.float64)
    shared[...] = 1.0
    ring.ops.OPS["sum"] = failing_add
    comm.allreduce([shared])  # the peers wait at the closing barrier
elif mode == "interrupt":

    class Interrupting:
        """The ring's pre-flight exchange (ring.mpi.exchange); rank 1 is sent SIGINT once
        its exchange is done."""

        def __init__(self, exchange):
            self._exchange = exchange

        def __getattr__(self, name):
            return getattr(self._exchange, name)

        def starter(self, nbytes):
            start, wait, requests = self._exchange.starter(nbytes)

            def interrupted(requests):
                wait(requests)
                if rank == 1 and armed:
                    os.kill(os.getpid(), signal.SIGINT)

            return start, interrupted, requests

    armed = False
    comm.exchange = Interrupting(comm.exchange)
    other = buf.copy()
    comm.allreduce([other])  # a full call, bound to other over the interrupting exchange
    armed = True
    comm.allreduce([other])  # the bound call, interrupted after its exchange
elif mode == "interrupt-shared":

    class InterruptingAllocation:
        """The ring's communicator; rank 1 is sent SIGINT once the first exchange of a
        shared allocation is done, while the others go on to the next."""

        def __init__(self, comm):
            self._comm = comm

        def __getattr__(self, name):
            return getattr(self._comm, name)

        def allgather(self, value):
            gathered = self._comm.allgather(value)
            if rank == 1:
                os.kill(os.getpid(), signal.SIGINT)
            return gathered

    comm._comm = InterruptingAllocation(comm._comm)
    comm.shared_buffer(1000)
elif mode == "hang":
    with Watchdog(float(sys.argv[2]), message="rank_dies.py: watchdog"):
        if rank == 1:
            time.sleep(600)
        comm.allreduce([buf])
print(f"finished on rank {rank}", flush=True)
