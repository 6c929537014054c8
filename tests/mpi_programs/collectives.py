"""Run under ``mpirun -n N``: the MPI ring against the float64 reference, many cases per launch.

Every rank draws every rank's input from the same seed, so each checks its own result
against a reference it computes alone.  Rank 0 prints one JSON line
``{"nodes", "reports": [{"rank", "cases", "failures"}, ...]}``; a rank with a failed case
exits 1.
"""

from __future__ import annotations

import json
import sys
import traceback
import warnings
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpi4py import MPI
from reference import ALL_DTYPES, check, ops_for, random_inputs

import ring
from ring.mpi import MpiRing
from ring.schedule import chunk_range, owned_chunk

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
PRIMES = [2, 3, 5, 7, 13, 97, 1009]
SIZES = sorted({0, 1, nodes - 1, nodes, nodes + 1, *PRIMES})
failures: list[str] = []
cases = 0


def case(label: str, fn) -> None:
    global cases
    cases += 1
    try:
        fn()
    except Exception:  # noqa: BLE001 - every failure is reported, the run goes on
        failures.append(f"{label}: {traceback.format_exc(limit=3)}")


def check_allreduce(comm, count, dtype, op, seed):
    inputs = random_inputs(np.random.default_rng(seed), nodes, count, dtype, op)
    buf = inputs[rank].copy()
    comm.allreduce([buf], op)
    check(buf, inputs, op)


def check_reduce_scatter(comm, count, dtype, op, seed):
    inputs = random_inputs(np.random.default_rng(seed), nodes, count, dtype, op)
    buf = inputs[rank].copy()
    comm.reduce_scatter([buf], op)
    a, b = chunk_range(count, nodes, owned_chunk(rank, nodes))
    check(buf[a:b], [x[a:b] for x in inputs], op)


def check_all_gather(comm, count, dtype, seed):
    inputs = random_inputs(np.random.default_rng(seed), nodes, count, dtype, "sum")
    buf = inputs[rank].copy()
    comm.all_gather([buf])
    for node in range(nodes):
        a, b = chunk_range(count, nodes, owned_chunk(node, nodes))
        np.testing.assert_array_equal(buf[a:b], inputs[node][a:b])


def main() -> int:
    # Integer sums and products wrap as the reference does; float16 products may underflow.
    warnings.simplefilter("ignore", RuntimeWarning)
    seed = 0
    # 16 bytes per segment cuts every chunk of these sizes into many segments.
    for segment_bytes in (0, 16):
        with MpiRing(world, segment_bytes=segment_bytes) as comm:
            for dtype in ALL_DTYPES:
                name = np.dtype(dtype).name
                for count in SIZES:
                    for op in ops_for(dtype):
                        seed += 1
                        label = f"seg={segment_bytes} {name} n={count} {op}"
                        args = (comm, count, dtype, op, seed)
                        case(f"allreduce {label}", partial(check_allreduce, *args))
                        case(f"reduce_scatter {label}", partial(check_reduce_scatter, *args))
                    label = f"all_gather seg={segment_bytes} {name} n={count}"
                    case(label, partial(check_all_gather, comm, count, dtype, seed))

    # A large buffer with the default segments (several per chunk), through the public API.
    for op in ("sum", "max"):
        seed += 1
        count = (3 << 20) // 8 + 7

        def public(op=op, seed=seed, count=count):
            inputs = random_inputs(np.random.default_rng(seed), nodes, count, np.float64, op)
            buf = inputs[rank].copy()
            ring.allreduce([buf], op, backend="mpi")
            check(buf, inputs, op)

        case(f"ring.allreduce backend=mpi float64 n={count} {op}", public)

    def public_phases():
        inputs = random_inputs(np.random.default_rng(99), nodes, 1009, np.int32, "sum")
        buf = inputs[rank].copy()
        ring.reduce_scatter([buf], backend="mpi", comm=world)
        ring.all_gather([buf], backend="mpi", comm=world)
        check(buf, inputs, "sum")

    case("ring.reduce_scatter + ring.all_gather backend=mpi", public_phases)

    # Outside the ring's traffic, the caller's own messages on the same communicator still
    # match theirs: the ring works on a duplicate.
    def isolation():
        mine = np.full(4, rank, dtype=np.int64)
        theirs = np.empty(4, dtype=np.int64)
        request = world.Irecv(theirs, source=(rank - 1) % nodes, tag=0)
        buf = np.ones(10, dtype=np.int64)
        ring.allreduce([buf], backend="mpi")
        world.Send(mine, dest=(rank + 1) % nodes, tag=0)
        request.Wait()
        assert (theirs == (rank - 1) % nodes).all() and (buf == nodes).all()

    case("caller's pending receive on the same communicator", isolation)

    # One line from rank 0: lines printed by several ranks may interleave.
    reports = world.gather({"rank": rank, "cases": cases, "failures": failures[:20]}, root=0)
    if rank == 0:
        print(json.dumps({"nodes": nodes, "reports": reports}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
