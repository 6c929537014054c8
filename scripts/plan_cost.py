"""What planning one new call shape costs, against 1,000 calls of the plan it settles on.

    .venv/bin/python scripts/plan_cost.py --nodes 4 --bytes 1024 [--shapes 11]
    mpirun -n 2 .venv/bin/python scripts/plan_cost.py --backend mpi --bytes 1024

A communicator of ``algorithm="auto"`` that has already planned one shape (the process,
the worker threads and the workers' round trip are warm) meets ``--shapes`` new ones in
turn. Each has a new length in the same size bucket, with the plans held in memory
forgotten first (``RING_WISDOM=off``), and runs ``max`` calls until its plan is made (the
calls and seconds of planning). Then 1,000 more calls time the plan. The script prints
the medians over the shapes and planning's share of the loop. Every call is a real one:
planning's seconds include the work the calls would do anyway.  With ``--backend mpi``,
each rank of ``mpirun`` is a node of an :class:`ring.mpi.MpiRing` (``--nodes`` is the
job's size), and rank 0 prints.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import ring
from ring.planning import store

LOOP = 1000


def _shape(comm, buffers: list) -> tuple[int, float, float]:
    """(calls, seconds) of planning the shape of ``buffers``, and the seconds of LOOP
    calls of its plan."""
    calls, started = 0, time.perf_counter()
    while calls == 0 or comm.measuring("allreduce", buffers, "max"):
        comm.allreduce(buffers, "max")
        calls += 1
    planning = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(LOOP):
        comm.allreduce(buffers, "max")
    return calls, planning, time.perf_counter() - started


def _communicator(backend: str, nodes: int):
    """(the communicator, the buffers one call takes given a length, this process prints)."""
    if backend == "mpi":
        from mpi4py import MPI

        from ring.mpi import MpiRing

        world = MPI.COMM_WORLD
        return (
            MpiRing(world, algorithm="auto"),
            lambda length: [np.full(length, 0.5, np.float32)],
            world.rank == 0,
        )
    return (
        ring.CpuCommunicator(nodes, algorithm="auto"),
        lambda length: [np.full(length, 0.5, np.float32) for _ in range(nodes)],
        True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "mpi"), default="cpu")
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--bytes", type=int, default=1024, help="per node, float32")
    parser.add_argument("--shapes", type=int, default=11)
    args = parser.parse_args()
    os.environ[store.WISDOM_ENV] = "off"  # read on first use: plans in memory only
    n = args.bytes // 4
    comm, buffers, prints = _communicator(args.backend, args.nodes)
    with comm:
        _shape(comm, buffers(max(1, n // 4)))
        results = []
        for k in range(args.shapes):
            store.forget_process()
            results.append(_shape(comm, buffers(max(1, n - k))))  # a new length: no plan kept
    if not prints:
        return
    calls, planning, loop = (statistics.median(r[i] for r in results) for i in range(3))
    spread = [r[1] * 1e3 for r in results]
    print(
        f"N={comm.nodes} {args.bytes} B: planning {planning * 1e3:.2f} ms"
        f" ({min(spread):.2f}-{max(spread):.2f}) in {calls:g} calls;"
        f" {LOOP} calls {loop * 1e3:.2f} ms; planning is {planning / loop:.0%} of them"
    )


if __name__ == "__main__":
    main()
