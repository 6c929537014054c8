"""Run under ``mpirun -n N`` (N >= 2): the call forms of ``ring.allreduce`` on the mpi
backend: op spellings, an n-D buffer, out of place, ``async_op=True``; a bad ``send`` on
rank 1 alone makes every rank raise, untouched, and the next call is right.

Rank 0 prints one JSON object: ``{"nodes", "right": [per rank], "refused": [[type, message,
untouched], ...per rank], "threads": MPI's thread level is MULTIPLE}``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from bad_input import run
from mpi4py import MPI

import ring

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
right = True


def mine(shape=(3, 5)) -> np.ndarray:
    return (np.arange(np.prod(shape), dtype=np.float64).reshape(shape) % 7 + 1 + rank) / 2


def every(shape=(3, 5)) -> list[np.ndarray]:
    return [(np.arange(np.prod(shape)).reshape(shape) % 7 + 1 + r) / 2 for r in range(nodes)]


def expect(buf, op) -> None:
    global right
    values = np.asarray(every(buf.shape))
    want = {
        "sum": values.sum(axis=0),
        "max": values.max(axis=0),
        "avg": values.sum(axis=0) / nodes,
    }[op]
    right = right and bool(np.allclose(buf, want, rtol=1e-12))


def main() -> int:
    for given, op in (("SUM", "sum"), (np.maximum, "max"), (ring.ReduceOp.AVG, "avg")):
        buf = mine()  # 2-D, contiguous
        ring.allreduce([buf], given, backend="mpi")
        expect(buf, op)

    send = mine((4, 3))
    send.flags.writeable = False
    recv = np.zeros(12)
    ring.allreduce([send], "sum", backend="mpi", recv=[recv])
    expect(recv.reshape(4, 3), "sum")
    global right
    right = right and bool(np.array_equal(send, mine((4, 3))))

    # A bad send on rank 1 only: every rank raises, nothing touched.
    bad = np.ones(12, np.float32) if rank == 1 else mine((12,))
    out = np.full(12, -1.0)
    refused = run(None, "refused", lambda: ring.allreduce([bad], backend="mpi", recv=[out]), out)
    buf = mine()
    ring.allreduce([buf], backend="mpi")
    expect(buf, "sum")

    # Bitwise ops and bool, against Python's own reduction over every rank's values.
    values = [np.arange(40, dtype=np.int32) * 7 + 3 * r for r in range(nodes)]
    flags = [np.arange(40) % (r + 2) == 0 for r in range(nodes)]
    for op, reduce in (("band", np.bitwise_and), ("bxor", np.bitwise_xor)):
        buf = values[rank].copy()
        ring.allreduce([buf], op, backend="mpi")
        right = right and bool(np.array_equal(buf, reduce.reduce(values)))
    for op, reduce in (("bor", np.logical_or), ("min", np.logical_and)):
        buf = flags[rank].copy()
        ring.allreduce([buf], op, backend="mpi")
        right = right and bool(np.array_equal(buf, reduce.reduce(flags)))

    multiple = MPI.Query_thread() == MPI.THREAD_MULTIPLE
    if multiple:
        buf = mine()
        works = [ring.allreduce([buf], "max", backend="mpi", async_op=True) for _ in range(3)]
        ring.allreduce([buf], "sum", backend="mpi")  # after the three
        right = right and all(w.is_completed() and w.wait() for w in works)
        want = np.asarray(every()).max(axis=0) * nodes
        right = right and bool(np.allclose(buf, want, rtol=1e-12))

    report = {"nodes": nodes, "right": world.gather(right, root=0), "refused": refused}
    report["threads"] = multiple
    if rank == 0:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
