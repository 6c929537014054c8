"""Run under ``mpirun -n 4``: a bad or mismatched algorithm raises the same error on every
rank, before any data moves.

Like ``bad_input.py`` (and with its ``run``): every rank makes its call, catches the error
and checks that its buffer is untouched; rank 0 prints one JSON object
``{"nodes", "scenarios": {name: [[type, message, untouched], ...per rank]}, "after": ok}``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from bad_input import run
from mpi4py import MPI

import ring
from ring.mpi import MpiRing
from ring.mpi.agree import RIDING_BYTES

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()


def base(count=11):
    return (np.arange(count) % 7 + 1 + rank).astype(np.float64)


def main() -> int:
    results = {}
    comm = MpiRing(world)
    scenarios = {
        "algorithms_differ": lambda buf: comm._collective(
            "allreduce", [buf], "sum", algorithm="direct" if rank == 1 else "ring"
        ),
        "unknown_everywhere": lambda buf: ring.allreduce([buf], backend="mpi", algorithm="nope"),
        "unknown_on_one_rank": lambda buf: ring.allreduce(
            [buf], backend="mpi", algorithm="nope" if rank == 2 else "rabenseifner"
        ),
        "no_such_collective": lambda buf: ring.reduce_scatter(
            [buf], backend="mpi", algorithm="recursive-doubling"
        ),
        "group_sizes_differ": lambda buf: ring.allreduce(
            [buf], backend="mpi", algorithm="hierarchical", group_size=2 if rank else 4
        ),
        "group_size_not_a_divisor": lambda buf: ring.allreduce(
            [buf], backend="mpi", algorithm="hierarchical", group_size=3
        ),
        "segments_differ": lambda buf: ring.allreduce(
            [buf], backend="mpi", algorithm="ring-segmented", segment_bytes=8 * (rank + 1)
        ),
        "constructor_algorithms_differ": lambda buf: MpiRing(
            world, algorithm="direct" if rank == 3 else "ring"
        ).allreduce([buf]),
        "direct_lengths_straddle_the_slot": lambda buf: comm._collective(
            "allreduce", [buf], "sum", algorithm="direct"
        ),
    }
    # float64: one element more than ring.mpi.agree.RIDING_BYTES on rank 0, half on others.
    within = RIDING_BYTES // 8
    counts = {"direct_lengths_straddle_the_slot": within + 1 if rank == 0 else within // 2}
    for name, call in scenarios.items():
        buf = base(counts.get(name, 11))
        results[name] = run(comm, name, lambda call=call, buf=buf: call(buf), buf)
    # After all that the same communicator still works, with every algorithm.
    ok = True
    for algorithm in ring.schedule.ALGORITHMS:
        buf = np.full(13, rank + 1, dtype=np.int64)
        ring.allreduce([buf], backend="mpi", algorithm=algorithm)
        ok = ok and bool((buf == nodes * (nodes + 1) // 2).all())
    after = world.gather(ok, root=0)
    comm.close()
    if rank == 0:
        print(json.dumps({"nodes": nodes, "scenarios": results, "after": all(after)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
