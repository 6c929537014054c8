"""A bound 1 KiB allreduce in a tight loop, beside the bare exchange it rides and MPI_Allreduce.

    mpirun -n 2 python loop.py [algorithm]      # default reduce-broadcast

Each of 7 rounds times 5,000 calls of each way in turn, on 256 float32 (1 KiB); rank 0
prints the medians of the rounds' per-call times (µs): our call (``MpiRing.allreduce``,
bound after its first call), its pre-flight ``Allgather`` alone (the slot: the row and
the buffer), and ``MPI_Allreduce``.  Without the barrier and per-call clock of the harness,
so each µs of Python between two exchanges shows in full.
"""

import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

from ring.mpi import MpiRing

world = MPI.COMM_WORLD
ring = MpiRing(world, algorithm=sys.argv[1] if len(sys.argv) > 1 else "reduce-broadcast")
buf = np.ones(256, np.float32)
out = np.empty_like(buf)
buffers = [buf]
ring.allreduce(buffers, "sum")  # binds the call (ring.mpi_bound)
exchange = ring._exchange  # the pre-flight slot and table: what the call sends, alone


def ours():
    ring.allreduce(buffers, "sum")


def bare_allgather():
    ring.comm.Allgather(*exchange)


def mpi_allreduce():
    world.Allreduce(buf, out, MPI.SUM)


ways = (ours, bare_allgather, mpi_allreduce)
times: dict = {way.__name__: [] for way in ways}
for _ in range(7):
    for way in ways:
        buf[:] = 1  # sums stay finite
        world.Barrier()
        start = time.perf_counter()
        for _ in range(5000):
            way()
        times[way.__name__].append((time.perf_counter() - start) / 5000 * 1e6)
if world.rank == 0:
    print("  ".join(f"{name} {statistics.median(t):.2f} us" for name, t in times.items()))
