"""Run under ``mpirun -n N``: a call that differs on the last rank (op, dtype, length or
algorithm) raises the same error on every rank and leaves every buffer as it was, on the
first call of a shape and on a repeated (bound) call alike, for calls that ride the
pre-flight exchange (small ``direct`` and ``reduce-broadcast``: the check is in band) and
for calls that do not; every correct call matches a float64 reference.

Rank 0 prints one JSON object ``{"nodes", "cases": {case: [[type, message, untouched,
correct], ...per rank]}}``: ``correct`` says every call before and after the bad one
matched the reference.
"""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
from bad_input import raised
from mpi4py import MPI

from ring.mpi import MpiRing

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
last = nodes - 1


def inputs(seed: int, count: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """This rank's random non-zero input, and the float64 sum of every rank's."""
    every = [np.random.default_rng((seed, r)).uniform(0.5, 2.0, count) for r in range(nodes)]
    return every[rank].astype(dtype), np.sum(every, axis=0)


def correct_call(comm, seed: int, count: int) -> bool:
    buf, reference = inputs(seed, count, np.float64)
    comm.allreduce([buf])
    return bool(np.allclose(buf, reference, rtol=1e-12, atol=0))


def diverging(kind: str, comm, count: int):
    """(buffer, call) of the last rank's differing call, the others' usual one."""
    differs = rank == last
    length = count + 1 if kind == "count" and differs else count
    dtype = np.float32 if kind == "dtype" and differs else np.float64
    buf, _ = inputs(99, length, dtype)
    op = "max" if kind == "op" and differs else "sum"
    if kind == "algorithm" and differs:
        comm.algorithm = "ring" if comm.algorithm != "ring" else "direct"
    return buf, lambda: comm.allreduce([buf], op)


def case(kind: str, algorithm: str, count: int, repeated: bool) -> list:
    comm = MpiRing(world, algorithm=algorithm)
    ok = True
    if repeated:  # the same call, bound to its buffer, before the one that differs
        buf, reference = inputs(7, count, np.float64)
        for _ in range(3):
            again = buf.copy()
            comm.allreduce([again])
            ok = ok and bool(np.allclose(again, reference, rtol=1e-12, atol=0))
        buf = inputs(99, count, np.float64)[0]
        for _ in range(3):
            comm.allreduce([buf])  # bound now; its result is checked above
    buf, call = diverging(kind, comm, count)
    before = buf.copy()
    seen = raised(call)
    untouched = bool(np.array_equal(buf, before)) or seen[0] == "no error"
    comm.algorithm = algorithm
    ok = ok and correct_call(comm, 11, count) and correct_call(comm, 12, count + 2)
    comm.close()
    return [*seen, untouched, ok]


def evicted() -> list:
    """More message lengths than the exchange keeps requests for (ring.mpi.exchange): the
    kept ones are freed and made again, and every call, bound ones included, still
    matches the reference."""
    comm = MpiRing(world, algorithm="direct")
    ok = True
    for count in (*range(1, 80), *range(1, 6)):  # each length its own send requests
        buf, reference = inputs(count, count, np.float64)
        work = buf.copy()
        for _ in range(3):  # bound from the second call on
            work[...] = buf
            comm.allreduce([work])
            ok = ok and bool(np.allclose(work, reference, rtol=1e-12, atol=0))
    comm.close()
    return ["no error", "", True, ok]


def main() -> int:
    cases = {"evicted": world.gather(evicted(), root=0)}
    kinds = ("op", "dtype", "count", "algorithm")
    # 3 and 13 elements ride the exchange; 5003 float64 (prime) do not.
    shapes = itertools.product(kinds, ("direct", "reduce-broadcast", "ring"), (3, 13, 5003))
    for (kind, algorithm, count), repeated in itertools.product(shapes, (False, True)):
        name = f"{kind}/{algorithm}/{count}/{'bound' if repeated else 'first'}"
        cases[name] = world.gather(case(kind, algorithm, count, repeated), root=0)
    if rank == 0:
        print(json.dumps({"nodes": nodes, "cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
