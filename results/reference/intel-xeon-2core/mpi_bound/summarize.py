"""Print, per run of this folder, our fastest MPI algorithm beside MPI_Allreduce, per size.

    python summarize.py n*_*.csv         # or long_*.csv

Per run (N, the code before or after, which pair): its commit (from the run's JSON), and per
size MPI_Allreduce's median time, our fastest algorithm with its time, and MPI_Allreduce's
time over ours (our speed in units of its); the runs' wrong elements summed.
"""

import csv
import json
import sys
from pathlib import Path

for name in sorted(a for a in sys.argv[1:] if not a.endswith(".samples.csv")):
    path = Path(name)
    run = json.loads(path.with_suffix(".json").read_text())
    times, wrong = {}, 0
    for row in csv.DictReader(path.open(newline="")):
        key = (row["backend"], int(row["bytes"]))
        times.setdefault(key, []).append((float(row["time_us"]), row["algorithm"]))
        wrong += int(row["wrong"])
    cells = []
    for size in sorted({k[1] for k in times}):
        ((peer, _),) = times[("mpi-allreduce", size)]
        ours, algorithm = min(times[("mpi", size)])
        label = f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
        cells.append(f"{label:>8s} {peer:6.1f} {ours:6.1f} {algorithm:18s} {peer / ours:4.2f}")
    commit = (run.get("environment", {}).get("git_commit") or run.get("git_commit") or "?")[:7]
    print(f"{path.stem:14s} {commit}  wrong {wrong}")
    for cell in cells:
        print("    " + cell)
