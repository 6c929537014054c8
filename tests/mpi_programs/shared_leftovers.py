"""Run under ``mpirun -n N``: parts of a shared allocation left by ranks that died.

``python shared_leftovers.py die``: every rank prints its pid; rank 1 is killed
(``SIGKILL``) while it maps its peers' parts, after every rank made its own, so no rank
removes its part: the job ends with every part still in the shared directory.
``python shared_leftovers.py allocate``: a healthy allocation, which removes the parts of
processes that no longer run (:func:`ring.mpi.shared.remove_stale`); rank 0 prints
``allocated``.
"""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import ring.mpi.shared
from ring.mpi import MpiRing

world = MPI.COMM_WORLD
rank = world.Get_rank()
comm = MpiRing(world)
print(f"rank {rank} pid {os.getpid()}", flush=True)
if sys.argv[1] == "die" and rank == 1:

    def killed(path: str, nbytes: int):
        os.kill(os.getpid(), signal.SIGKILL)

    ring.mpi.shared._map = killed
array = comm.shared_buffer(1000, np.float64)
array[...] = rank + 1
comm.allreduce([array])
assert np.all(array == sum(range(1, world.Get_size() + 1)))
if rank == 0:
    print("allocated", flush=True)
