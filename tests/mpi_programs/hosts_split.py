"""Run across emulated hosts (scripts/hosts.sh mpirun): rank 0 prints one line per rank
(gathered, so ranks' lines cannot interleave), ``rank host shared-group-size shm-files``,
where the shared group is MPI_Comm_split_type(SHARED) and shm-files the ranks whose marker
file this rank sees in /dev/shm (comma-separated), so a test can check that ranks are
grouped, and share memory, per host and never across."""

from __future__ import annotations

import os
import socket
import sys

from mpi4py import MPI

world = MPI.COMM_WORLD
shared = world.Split_type(MPI.COMM_TYPE_SHARED)
tag = sys.argv[1]
marker = f"/dev/shm/{tag}-rank{world.rank}"
with open(marker, "w"):
    pass
world.Barrier()
seen = sorted(
    int(name.rsplit("rank", 1)[1])
    for name in os.listdir("/dev/shm")
    if name.startswith(f"{tag}-rank")
)
world.Barrier()
os.unlink(marker)
line = f"{world.rank} {socket.gethostname()} {shared.size} {','.join(map(str, seen))}"
lines = world.gather(line, root=0)
if world.rank == 0:
    print("\n".join(lines), flush=True)
