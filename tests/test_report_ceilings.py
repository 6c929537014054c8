"""Each ceiling fraction names the run it was measured in, and the findings quote that run."""

from types import SimpleNamespace

import numpy as np
import pandas as pd

from ring.report.ceilings import ceiling_fractions
from ring.report.findings import _ceiling_reached

MIB = 1 << 20


def _rows(rng) -> pd.DataFrame:
    # One series measured in one run per N, as the workflow lays the sweeps out.
    records = []
    for nodes, run in ((2, "cpu/sweep_n2"), (4, "cpu/sweep_n4")):
        for size in (MIB, 64 * MIB, 256 * MIB):
            records.append(
                {
                    "series": "cpu pairwise",
                    "nodes": nodes,
                    "run": run,
                    "backend": "cpu",
                    "bytes": size,
                    "traffic_GBps": float(rng.uniform(1, 9)),
                    "busbw_GBps": float(rng.uniform(1, 9)),
                }
            )
    return pd.DataFrame.from_records(records)


def _ceilings(runs) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"run": run, "device": False, "GBps": gbps, "ceiling": "add_GBps", "link": False}
            for run, gbps in zip(runs, (30.0, 10.0), strict=True)
        ]
    )


def test_each_fraction_is_against_its_own_runs_ceiling_and_names_it():
    rng = np.random.default_rng(5)
    rows = _rows(rng)
    runs = ["cpu/sweep_n2", "cpu/sweep_n4"]
    fractions = ceiling_fractions(rows, _ceilings(runs), dict.fromkeys(runs, 16 * MIB))
    assert list(fractions["run"]) == runs
    for record in fractions.itertuples():
        mine = rows[(rows["run"] == record.run) & (rows["bytes"] >= 64 * MIB)]
        ceiling = 30.0 if record.run == runs[0] else 10.0
        assert record.nodes == int(mine["nodes"].iloc[0])
        assert np.isclose(record.max_fraction_beyond_llc, mine["traffic_GBps"].max() / ceiling)


class _Model:
    def __init__(self, rows, fractions):
        self.rows = rows
        self.ceiling_fractions = fractions
        self.inputs = SimpleNamespace(runs=[])  # no start/end ceilings: no drift clause


def test_the_finding_quotes_the_run_of_the_highest_fraction_not_the_series_first_run():
    rng = np.random.default_rng(6)
    rows = _rows(rng)
    runs = ["cpu/sweep_n2", "cpu/sweep_n4"]
    # The N = 4 run's ceiling is the lower one, so its fraction is the highest.
    rows.loc[rows["run"] == runs[1], "traffic_GBps"] = 9.5
    rows.loc[rows["run"] == runs[0], "traffic_GBps"] = 1.0
    fractions = ceiling_fractions(rows, _ceilings(runs), dict.fromkeys(runs, 16 * MIB))
    (sentence,) = _ceiling_reached(_Model(rows, fractions))
    assert f"N=4, run {runs[1]})" in sentence
    assert runs[0] + ")" not in sentence.split("N=4")[1]
