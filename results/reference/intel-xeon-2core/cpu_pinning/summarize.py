"""Per run and size: the fastest and slowest of the five series (four of which run one plan
at N = 2) and their ratio, unpinned against pinned."""

from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent

for kind in ("unpinned", "pinned"):
    for path in sorted(HERE.glob(f"{kind}-*.csv")):
        if path.name.endswith(".samples.csv"):
            continue
        rows = pd.read_csv(path)
        table = rows.pivot_table(index="bytes", columns="algorithm", values="time_us")
        cells = [
            f"{size >> 20:>2} MiB {low:8.0f}-{high:<6.0f} ({high / low:.2f})"
            for size, low, high in zip(
                table.index, table.min(axis=1), table.max(axis=1), strict=True
            )
        ]
        print(f"{path.stem:<11}", "  ".join(cells))
