"""Run under ``mpirun -n N TABLE_A TABLE_B``: ``algorithm="auto"`` resolves to the same algorithm
on every rank, runs it, and ranks that read different decision
tables fail together.

Rank 0 prints one JSON object: ``{"nodes", "picks": [[nbytes, [pick per rank]], ...],
"runs": [[nbytes, pick, correct on every rank], ...], "differ": [[type, message,
untouched], ...per rank]}``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from bad_input import run
from mpi4py import MPI

import ring
from ring import auto
from ring.mpi import MpiRing
from ring.mpi.agree import RIDING_BYTES

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
SIZES = [8 * 2**k for k in range(0, 23, 2)] + [24, 1000, 123456]


def use_table(path: str) -> None:
    os.environ[auto.TABLE_ENV] = path
    auto.reset()


def differing_count(table_a: str, table_b: str) -> int:
    """The length of the first float64 call the two tables pick apart, above the sizes
    whose calls ride the pre-flight exchange (auto picks those by one rule, tables aside)."""
    for count in (RIDING_BYTES // 8 + 1) * 2 ** np.arange(12):
        picked = set()
        for table in (table_a, table_b):
            use_table(table)
            picked.add(auto.choose("mpi", "allreduce", nodes, int(count) * 8))
        if len(picked) > 1:
            return int(count)
    raise SystemExit("the two tables pick alike at every size above the riding size")


def main() -> int:
    table_a, table_b = sys.argv[1:3]
    use_table(table_a)
    picks = [[n, world.gather(auto.choose("mpi", "allreduce", nodes, n), root=0)] for n in SIZES]
    runs = []
    for count in (8, 1 << 18):
        buf = (np.arange(count) % 5 + rank).astype(np.float64)
        expected = nodes * (np.arange(count) % 5) + nodes * (nodes - 1) / 2
        ring.allreduce([buf], backend="mpi", algorithm="auto")
        correct = world.gather(bool(np.array_equal(buf, expected)), root=0)
        runs.append([count * 8, auto.choose("mpi", "allreduce", nodes, count * 8), correct])
    comm = MpiRing(world, algorithm="auto")
    count = differing_count(table_a, table_b)
    use_table(table_b if rank == 1 else table_a)
    buf = (np.arange(count) + rank).astype(np.float64)
    differ = run(comm, "differ", lambda: comm.allreduce([buf]), buf)
    comm.close()
    if rank == 0:
        print(json.dumps({"nodes": nodes, "picks": picks, "runs": runs, "differ": differ}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
