"""How much slower each round's calls were than the point's five rounds, per group of runs.

    python summarize.py          # in this folder: cpu, mpi_n2, mpi_n4 x before, after

Per point (series and size of one run): each round's median time over the median of the
five rounds' medians; then, over every point of a group's three runs, the geometric mean
of that ratio per round, and round 1's separately at the run's first size (64 B) and at
the later ones (256 B to 16 KiB); with the runs' wrong elements and commits.
"""

import csv
import glob
import json
import math
import statistics
from pathlib import Path

SIZES_FIRST = {64}


def gm(values):
    return math.exp(statistics.mean(math.log(v) for v in values)) if values else float("nan")


for kind in ("cpu", "mpi_n2", "mpi_n4"):
    for variant in ("before", "after"):
        per_round = [[] for _ in range(5)]
        first, later, wrong, commits = [], [], 0, set()
        for name in sorted(glob.glob(f"{kind}_{variant}_*.csv")):
            if name.endswith(".samples.csv"):
                continue
            run = json.loads(Path(name[:-4] + ".json").read_text())
            commits.add((run["git_commit"] or "?")[:7])
            rows = csv.DictReader(Path(name).read_text().splitlines())
            wrong += sum(int(row["wrong"]) for row in rows)
            calls = {}
            for row in csv.DictReader(Path(name[:-4] + ".samples.csv").read_text().splitlines()):
                key = (row["backend"], row["algorithm"], row["nodes"], int(row["bytes"]))
                calls.setdefault(key, []).append(float(row["time_us"]))
            for key, times in calls.items():
                k = len(times) // 5
                medians = [statistics.median(times[r * k : (r + 1) * k]) for r in range(5)]
                middle = statistics.median(medians)
                for r in range(5):
                    per_round[r].append(medians[r] / middle)
                (first if key[3] in SIZES_FIRST else later).append(medians[0] / middle)
        rounds = " ".join(f"{gm(r):.3f}" for r in per_round)
        print(
            f"{kind:7s} {variant:7s} rounds 1-5: {rounds}   round 1 at the first size "
            f"{gm(first):.2f}, later sizes {gm(later):.2f}   points {len(per_round[0])}, "
            f"wrong {wrong}   {', '.join(sorted(commits))}"
        )
