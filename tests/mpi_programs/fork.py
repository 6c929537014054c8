"""Run under ``mpirun -n N`` (N >= 2): a child of ``fork()`` on each rank, after the rank
ran MPI calls, refuses every MPI call in one line instead of joining its parent's peers:
``ring.allreduce(backend="mpi")``, a call on a ring its parent made, and a new ring.  The
parent's ring then still runs.

Rank 0 prints one JSON object: ``{"nodes", "child": [per rank: [exit code, [message, ...]]],
"after": [per rank]}``.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import ring
from ring.mpi import MpiRing

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()


def buffer() -> np.ndarray:
    return np.full(20000, rank + 1.0)


def right(buf: np.ndarray) -> bool:
    return bool((buf == nodes * (nodes + 1) / 2).all())


def in_child(held: MpiRing, read) -> None:
    """The child: each MPI call must raise; its one-line messages go down ``read``'s pipe."""
    signal.alarm(20)  # a call that joined the parent's peers would wait: it must not
    said = []
    calls = {
        "module": lambda: ring.allreduce([buffer()], backend="mpi"),
        "held": lambda: held.allreduce([buffer()]),
        "new": lambda: MpiRing(world),
    }
    for name, call in calls.items():
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - what the child saw is the result
            said.append(f"{name}: {type(exc).__name__}: {exc}")
        else:
            said.append(f"{name}: no error")
    os.write(read, json.dumps(said).encode())
    os._exit(0)


def main() -> int:
    buf = buffer()
    ring.allreduce([buf], backend="mpi")
    held = MpiRing(world)
    ok = right(buf)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        in_child(held, write)
    os.close(write)
    with os.fdopen(read) as pipe:
        said = json.loads(pipe.read() or "[]")
    _, status = os.waitpid(pid, 0)
    for call in (lambda b: ring.allreduce([b], backend="mpi"), lambda b: held.allreduce([b])):
        mine = buffer()
        call(mine)
        ok = ok and right(mine)
    held.close()
    child = world.gather([os.waitstatus_to_exitcode(status), said], root=0)
    after = world.gather(ok, root=0)
    if rank == 0:
        print(json.dumps({"nodes": nodes, "child": child, "after": after}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
