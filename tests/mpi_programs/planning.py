"""Run under ``mpirun -n N WISDOM_DIR`` (N >= 2): ``algorithm="auto"`` plans by measuring
with every rank choosing the same plan.

The table's candidates are ring, direct and recursive-doubling.  Rank 0 is slow running
ring and rank 1 slow running direct (a sleep in their programs), so each rank alone would
plan differently; agreeing on the slowest rank's time, every rank must plan
recursive-doubling.  Then: a second ring starts tuned from rank 0's wisdom although rank 1
reads other wisdom; a call that differs on one rank mid-planning raises the same error on
every rank; calls on one buffer run each candidate bound to it (its program made once);
``planning="estimate"`` measures nothing; where the budget ends before most candidates are
timed, their first calls' times decide; a call large enough to cut runs one candidate per
slice.

Rank 0 prints one JSON object: ``{"nodes", "plans": [per rank], "calls": [per rank],
"tuned": {"plans", "calls"}, "differ": [[type, message, untouched], ...], "programs": [per
rank: programs made while one buffer planned and ran], "estimate":
{"plans", "calls"}, "short budget": [per rank], "cut": {"plans", "shared": [per rank: calls
cut]}, "correct": bool}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partial

import numpy as np
from bad_input import run
from mpi4py import MPI

import ring.auto
from ring.mpi import MpiRing
from ring.mpi import communicator as mpi_communicator
from ring.mpi.planning import MpiPlanner
from ring.planning import race, store

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
SLOW = {0: "ring", 1: "direct"}.get(rank)
COUNT = 9000  # 72 kB of float64: above ring.mpi.agree.RIDING_BYTES, where auto measures
correct = True


def candidates(*_args, **_kwargs):
    return ("ring", "direct", "recursive-doubling")


def slowed(host_program):
    """The ring's program maker, with this rank's SLOW algorithm 20 ms slower."""

    def make(self, form, buf, block):
        program = host_program(self, form, buf, block)
        if form.algorithm != SLOW:
            return program

        def slow():
            time.sleep(0.02)
            program()

        return slow

    return make


def calls(comm, count: int = COUNT, times: int = 30) -> None:
    """``times`` auto allreduces on fresh data, each checked against float64 NumPy."""
    global correct
    for i in range(times):
        buf = (np.arange(count) % 11 + rank + i).astype(np.float64)
        expected = nodes * (np.arange(count) % 11 + i) + nodes * (nodes - 1) / 2
        comm.allreduce([buf])
        correct = correct and bool(np.array_equal(buf, expected))


def one_buffer(count: int = 7 * COUNT) -> int:
    """A new shape planned and run on one buffer, reset in place and checked each call;
    returns how many programs were made for it."""
    global correct
    made = []
    host_program = mpi_communicator.MpiRing._host_program
    mpi_communicator.MpiRing._host_program = lambda *a: made.append(1) or host_program(*a)
    comm = MpiRing(world, algorithm="auto")
    buf = np.empty(count)
    expected = nodes * (np.arange(count) % 13) + nodes * (nodes - 1) / 2
    for _ in range(40):
        buf[...] = np.arange(count) % 13 + rank
        comm.allreduce([buf])
        correct = correct and bool(np.array_equal(buf, expected))
    assert comm.planned("allreduce", [buf], "sum") is not None
    comm.close()
    mpi_communicator.MpiRing._host_program = host_program
    return len(made)


def plans(comm) -> list:
    return world.gather(sorted(set(p[1] for p in comm._planner._plans.values())), root=0)


def main() -> int:
    folder = sys.argv[1]
    os.environ[store.WISDOM_ENV] = os.path.join(folder, f"wisdom-{min(rank, 1)}.json")
    store.forget_process()
    ring.auto.ranked = candidates
    ring.auto.unpriced = lambda *_args: ()
    mpi_communicator.MpiRing._host_program = slowed(mpi_communicator.MpiRing._host_program)
    report: dict = {"nodes": nodes}

    comm = MpiRing(world, algorithm="auto")
    calls(comm)
    report["plans"] = plans(comm)
    report["calls"] = world.gather(race.planning_cost().calls, root=0)
    comm.close()

    # Rank 1's wisdom says ring for every shape rank 0 planned: rank 0's plan is the one run.
    keys = world.bcast(list(store.wisdom().plans) if rank == 0 else None, root=0)
    if rank == 1:
        store.wisdom().plans.update({k: {"choice": ["ring"], "seconds": {}} for k in keys})
    before = race.planning_cost().calls
    tuned = MpiRing(world, algorithm="auto")
    calls(tuned, times=5)
    report["tuned"] = {
        "plans": plans(tuned),
        "calls": world.gather(race.planning_cost().calls - before, root=0),
    }
    # Mid-planning of a new shape, rank 1 passes another length: the same error everywhere.
    calls(tuned, count=3 * COUNT, times=1)
    other = np.ones(3 * COUNT + (rank == 1), dtype=np.float64)
    report["differ"] = run(tuned, "differ", partial(tuned.allreduce, [other]), other)
    calls(tuned, count=3 * COUNT, times=20)
    tuned.close()

    report["programs"] = world.gather(one_buffer(), root=0)

    before = race.planning_cost().calls
    estimate = MpiRing(world, algorithm="auto", planning="estimate")
    calls(estimate, count=5 * COUNT, times=5)
    report["estimate"] = {
        "plans": plans(estimate),
        "calls": world.gather(race.planning_cost().calls - before, root=0),
    }
    estimate.close()

    # A budget that ends before most candidates are timed: their first calls' times decide
    # (ring's and direct's take 20 ms more on a rank, recursive doubling's next to none).
    os.environ[race.BUDGET_ENV] = "0.07"
    short = MpiRing(world, algorithm="auto")
    calls(short, count=9 * COUNT, times=10)
    report["short budget"] = plans(short)
    short.close()
    del os.environ[race.BUDGET_ENV]

    # A call large enough to cut: each trial call runs one candidate per slice, all timed.
    shared = []
    real = (race.slices_apart, MpiPlanner.timed_share)
    race.slices_apart = lambda nodes, nbytes, caches=None: 3
    MpiPlanner.timed_share = lambda *a: shared.append(1) or real[1](*a)
    cut = MpiRing(world, algorithm="auto")
    calls(cut, count=17 * COUNT, times=15)  # a size no shape above planned
    report["cut"] = {"plans": plans(cut), "shared": world.gather(len(shared), root=0)}
    cut.close()
    race.slices_apart, MpiPlanner.timed_share = real

    report["correct"] = world.gather(correct, root=0)
    if rank == 0:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
