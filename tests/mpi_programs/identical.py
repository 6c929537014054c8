"""Run under ``mpirun -n N``: every algorithm, op and dtype (complex products among them),
on ordinary buffers, on a shared buffer (by position) and with ``auto``; rank 0 gathers
every rank's result bytes and prints one JSON line ``{"nodes", "cases", "different"}``
listing the cases where ranks differ (or differ from the float64 reference)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpi4py import MPI
from reference import check, ops_for, random_inputs

from ring.mpi import MpiRing
from ring.schedule import ALGORITHMS

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
DTYPES = [np.complex128, np.complex64, np.float32, np.int64]
LENGTH = 263


def algorithms():
    for algorithm in ALGORITHMS:
        if algorithm == "hierarchical":
            for size in (s for s in range(2, nodes) if nodes % s == 0):
                yield algorithm, {"group_size": size}
        else:
            yield algorithm, {}
    yield "auto", {}


def main() -> None:
    rng = np.random.default_rng(11)
    cases, different = 0, []
    with MpiRing(world) as comm:
        shared = {np.dtype(d): comm.shared_buffer(LENGTH, d) for d in DTYPES}
        for algorithm, options in algorithms():
            ring = MpiRing(world, algorithm=algorithm, **options)
            for dtype in DTYPES:
                for op in ops_for(dtype):
                    inputs = random_inputs(rng, nodes, LENGTH, dtype, op)
                    for kind, buf in (("own", inputs[rank].copy()), ("shared", None)):
                        if buf is None:
                            buf = shared[np.dtype(dtype)]
                            buf[...] = inputs[rank]
                            world.Barrier()
                        ring.allreduce([buf], op)
                        check(buf, inputs, op)
                        mine = np.ascontiguousarray(buf).view(np.uint8).tobytes()
                        everyone = world.gather(mine, root=0)
                        cases += 1
                        if rank == 0 and any(b != everyone[0] for b in everyone[1:]):
                            different.append([algorithm, options, np.dtype(dtype).name, op, kind])
            ring.close()
    if rank == 0:
        print(json.dumps({"nodes": nodes, "cases": cases, "different": different}), flush=True)


main()
