"""Print, per run of this folder, our fastest shared-buffer call beside MPI_Allreduce.

    python summarize.py n*_*.csv

Per run (N, where the parts were made, which pair): its add ceiling, the huge= option of the
parts' tmpfs (from the run's JSON), and per size MPI_Allreduce's time on host and on shared
memory (ms), our fastest algorithm on shared memory with its time, and MPI_Allreduce's host
time over ours (our speed in units of its).
"""

import csv
import json
import sys
from pathlib import Path

for name in sorted(a for a in sys.argv[1:] if not a.endswith(".samples.csv")):
    path = Path(name)
    run = json.loads(path.with_suffix(".json").read_text())
    times = {}
    for row in csv.DictReader(path.open(newline="")):
        key = (row["backend"], row["buffers"], int(row["bytes"]))
        times.setdefault(key, []).append((float(row["time_us"]) / 1e3, row["algorithm"]))
    cells = []
    for size in sorted({k[2] for k in times}):
        ((peer, _),) = times[("mpi-allreduce", "host", size)]
        ((peer_shared, _),) = times[("mpi-allreduce", "shared", size)]
        ours, algorithm = min(times[("mpi", "shared", size)])
        cells.append(
            f"{size >> 20:3d} MiB  peer {peer:6.1f} {peer_shared:6.1f}  "
            f"ours {ours:5.1f} {algorithm:14s} {peer / ours:4.2f}"
        )
    ceiling = run["ceilings"]["add_GBps"]
    huge = run["environment"]["huge_pages"]["on_directory"]
    print(f"{path.stem:10s} add {ceiling:3.0f}  huge={huge:6s}  " + "  |  ".join(cells))
