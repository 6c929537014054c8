"""Run under ``mpirun -n N``: every algorithm of the MPI backend against the references.

For each algorithm (and its options: ring-segmented with a tiny and the default block,
hierarchical with every group size that divides N and the host's default), each collective
it has, several dtypes and every op (each pair at one of the lengths 0, 1, < N, > N and
primes, rotating), and every length in float64 and exact int64 sums.  ``--large`` adds
one buffer of 3,000,017 elements per algorithm.  Every rank draws every rank's input from
the same seed and checks its own result.  Rank 0 prints one JSON line
``{"nodes", "reports": [{"rank", "cases", "failures", "seconds"}, ...]}``; a rank with a
failed case exits 1.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpi4py import MPI
from reference import check, ops_for, random_inputs

import ring
from ring.mpi import MpiRing
from ring.schedule import ALGORITHMS, chunk_range, owned_chunk

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
SIZES = sorted({0, 1, max(nodes - 1, 1), nodes + 1, 13, 97, 1009})
DTYPES = [np.int8, np.uint32, np.int64, np.float16, np.float32, np.float64, np.complex64]
LARGE = 3_000_017
# Blocks of two float64 elements: many ring passes per call (never on LARGE: millions).
TINY_SEGMENT = 16
failures: list[str] = []
cases = 0


def case(label: str, fn, *args) -> None:
    global cases
    cases += 1
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - every failure is reported, the run goes on
        failures.append(f"{label}: {traceback.format_exc(limit=4)}")


def inputs_for(seed, count, dtype, op):
    return random_inputs(np.random.default_rng(seed), nodes, count, dtype, op)


def check_allreduce(comm, count, dtype, op, seed):
    inputs = inputs_for(seed, count, dtype, op)
    buf = inputs[rank].copy()
    comm.allreduce([buf], op)
    check(buf, inputs, op)


def check_reduce_scatter(comm, count, dtype, op, seed):
    inputs = inputs_for(seed, count, dtype, op)
    buf = inputs[rank].copy()
    comm.reduce_scatter([buf], op)
    a, b = chunk_range(count, nodes, owned_chunk(rank, nodes))
    check(buf[a:b], [x[a:b] for x in inputs], op)


def check_all_gather(comm, count, dtype, seed):
    inputs = inputs_for(seed, count, dtype, "sum")
    buf = inputs[rank].copy()
    comm.all_gather([buf])
    for node in range(nodes):
        a, b = chunk_range(count, nodes, owned_chunk(node, nodes))
        np.testing.assert_array_equal(buf[a:b], inputs[node][a:b])


def variants():
    """(label, MpiRing options) of every algorithm and option worth a launch's time."""
    for algorithm in ALGORITHMS:
        if algorithm == "ring-segmented":
            yield algorithm, {"algorithm": algorithm, "segment_bytes": TINY_SEGMENT}
            yield algorithm, {"algorithm": algorithm}
        elif algorithm == "hierarchical":
            yield algorithm, {"algorithm": algorithm}  # groups: the ranks of each host
            for size in range(1, nodes + 1):
                if nodes % size == 0:
                    yield algorithm, {"algorithm": algorithm, "group_size": size}
        else:
            yield algorithm, {"algorithm": algorithm}


def has(algorithm: str, collective: str) -> bool:
    try:
        ring.schedule.check_algorithm(algorithm, collective)
    except ValueError:
        return False
    return True


def run_variant(label: str, options: dict, seed: int, dtypes: list, large: bool) -> int:
    """Every op of ``dtypes`` (each pair at one length, the lengths rotating so that every
    one is met), and every length in float64 sum and exact int64 sum."""
    algorithm = options["algorithm"]
    collectives = [c for c in ("reduce_scatter", "all_gather") if has(algorithm, c)]
    with MpiRing(world, **options) as comm:
        turn = seed
        for dtype in dtypes:
            name = np.dtype(dtype).name
            for op in ops_for(dtype):
                seed, turn = seed + 1, turn + 1
                count = SIZES[turn % len(SIZES)]
                what = f"{label} {options} {name} n={count} {op}"
                case(f"allreduce {what}", check_allreduce, comm, count, dtype, op, seed)
                if "reduce_scatter" in collectives:
                    args = (comm, count, dtype, op, seed)
                    case(f"reduce_scatter {what}", check_reduce_scatter, *args)
            if "all_gather" in collectives:
                what = f"all_gather {label} {options} {name} n={count}"
                case(what, check_all_gather, comm, count, dtype, seed)
        for count in SIZES:
            for dtype in (np.float64, np.int64):
                seed += 1
                what = f"allreduce {label} {options} {np.dtype(dtype).name} n={count} sum"
                case(what, check_allreduce, comm, count, dtype, "sum", seed)
        if large and options.get("segment_bytes") != TINY_SEGMENT:
            seed += 1
            what = f"allreduce {label} {options} float64 n={LARGE} sum"
            case(what, check_allreduce, comm, LARGE, np.float64, "sum", seed)
    return seed


def public_api(seed: int) -> None:
    """``ring.allreduce(backend="mpi", algorithm=...)`` on every algorithm."""
    for algorithm in ALGORITHMS:
        seed += 1

        def call(algorithm=algorithm, seed=seed):
            inputs = inputs_for(seed, 1009, np.float64, "sum")
            buf = inputs[rank].copy()
            ring.allreduce([buf], backend="mpi", algorithm=algorithm)
            check(buf, inputs, "sum")

        case(f"ring.allreduce backend=mpi algorithm={algorithm}", call)


def main() -> int:
    # Integer sums and products wrap as the reference does; float16 products may underflow.
    warnings.simplefilter("ignore", RuntimeWarning)
    large = "--large" in sys.argv[1:]
    start = time.perf_counter()
    seed = 0
    for index, (label, options) in enumerate(variants()):
        # Oversubscribed, a launch of many ranks is slow: from 5 ranks on, each variant
        # takes two of the dtypes in turn (every dtype is still met at every N).
        dtypes = DTYPES if nodes < 5 else [DTYPES[index % 7], DTYPES[(index + 3) % 7]]
        if rank == 0:  # where a launch that hangs was (the test shows stderr)
            print(f"variant {options}", file=sys.stderr, flush=True)
        seed = run_variant(label, options, seed, dtypes, large)
    public_api(seed)
    report = {
        "rank": rank,
        "cases": cases,
        "failures": failures[:20],
        "seconds": round(time.perf_counter() - start, 1),
    }
    reports = world.gather(report, root=0)
    if rank == 0:
        print(json.dumps({"nodes": nodes, "reports": reports}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
