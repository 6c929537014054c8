"""Run under ``mpirun -n 1``: what needs MPI but no second rank.  Prints ``single_rank ok``
or fails with the assertion's traceback."""

from __future__ import annotations

import os

import numpy as np
from mpi4py import MPI

import ring
import ring.mpi
from ring import CommunicatorClosedError


def raises(exc_type, text, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as exc:
        assert text in str(exc), str(exc)
    else:
        raise AssertionError(f"{fn.__name__} raised no {exc_type.__name__}")


# One rank: every collective is a checked no-op.
buf = np.arange(5.0)
ring.allreduce([buf], backend="mpi")
ring.reduce_scatter([buf], "max", backend="mpi")
ring.all_gather([buf], backend="mpi")
assert (buf == np.arange(5.0)).all()
raises(ValueError, "unknown op 'mean'", ring.allreduce, [buf], "mean", backend="mpi")

# The API's cache: one ring per communicator, a new one once it is closed or freed.
first = ring.get_communicator(1, backend="mpi")
assert first is ring.get_communicator(1, backend="mpi", comm=MPI.COMM_WORLD)
assert isinstance(first, ring.mpi.MpiRing) and first.nodes == 1 and first.rank == 0
first.close()
raises(CommunicatorClosedError, "closed", first.allreduce, [buf])
second = ring.get_communicator(1, backend="mpi")
assert second is not first and not second.closed
mine = MPI.COMM_WORLD.Dup()
third = ring.get_communicator(1, backend="mpi", comm=mine)
assert third is not second and third.comm != mine
mine.Free()
assert third.closed  # the communicator it was made from is gone

# Options.  A per-call option goes with each call: the cached ring does not take it.
raises(
    TypeError,
    "algorithm: option(s) of each call on backend 'mpi', not of its cached communicator",
    ring.get_communicator,
    1,
    backend="mpi",
    algorithm="direct",
)
ring.allreduce([buf], backend="mpi", algorithm="direct")
assert ring.mpi.cache_key(1) == ring.mpi.cache_key(1, comm=MPI.COMM_WORLD)
# segment_bytes travels with each call (compared across ranks there), not in the key: a
# rank asking for another value must not make a new ring while its peers use the cached one.
assert ring.mpi.cache_key(1) == ring.mpi.cache_key(1, segment_bytes=0)
raises(TypeError, "unknown option(s) for backend 'mpi': sync", ring.mpi.cache_key, 1, sync="x")
raises(TypeError, "comm must be an mpi4py communicator", ring.mpi.cache_key, 1, comm="world")
raises(ValueError, "segment_bytes must be >= 0", ring.mpi.MpiRing, segment_bytes=-1)
raises(TypeError, "intracommunicator", ring.mpi.MpiRing, "world")
with ring.mpi.MpiRing(segment_bytes=0) as comm:
    comm.allreduce([buf])
assert comm.closed

# CUDA-awareness: the override, and otherwise a detection that names its source.
os.environ[ring.mpi.CUDA_AWARE_ENV] = "1"
ring.mpi.cuda_aware.cache_clear()
assert ring.mpi.cuda_aware() == (True, "RING_MPI_CUDA_AWARE=1")
del os.environ[ring.mpi.CUDA_AWARE_ENV]
ring.mpi.cuda_aware.cache_clear()
aware, how = ring.mpi.cuda_aware()
assert isinstance(aware, bool) and ("MPIX_Query_cuda_support" in how or "ompi_info" in how), how

print("single_rank ok", flush=True)
