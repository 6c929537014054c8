"""Confidence intervals of the headline ratios, from the timed calls themselves.

The harness writes every timed call beside each result CSV (``FILE.samples.csv``).  A ratio
of two medians measured in one run (our ring and a peer, interleaved size by size) gets a
95 % percentile bootstrap interval: both series' calls are resampled with replacement and
the ratio of the resampled medians recomputed, :data:`DRAWS` times, with a fixed seed so the
report is reproducible.  Ratios across runs are not given an interval here: two runs differ
by more than their calls' spread says.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ..bench.results import samples_path
from ..model.bootstrap import DRAWS, bootstrap_ratio

__all__ = ["DRAWS", "bootstrap_ratio", "one_run_ratios", "samples_of", "sides_of_one"]

SEED = 0
_KEY = ["backend", "sync", "nodes", "bytes"]
# What tells the series of one backend apart in a run that measured several (algorithms,
# executors, dtypes, ...): its rows and its timed calls carry these columns (ring.bench), so
# each ratio's interval is drawn from its own two series' calls.  Samples written before
# they did carry the key columns only, and are matched on those.
_VARIANTS = ["algorithm", "dtype", "op", "executor", "inline_bytes", "graphs"]


@functools.cache
def _read_samples(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    frame["sync"] = frame["sync"].astype(str)
    return frame


def samples_of(run) -> pd.DataFrame | None:
    """The timed calls of a run (None for results written before the harness kept them)."""
    return _read_samples(samples_path(run.csv_path).resolve())


def _calls(samples: pd.DataFrame, point: dict) -> np.ndarray:
    mask = np.ones(len(samples), dtype=bool)
    for key, value in point.items():
        if key not in samples.columns:
            continue
        column = samples[key]
        mask &= (column.isna() if pd.isna(value) else column == value).to_numpy()
    return samples.loc[mask, "time_us"].to_numpy()


def _point(rows: pd.DataFrame, series: str, nodes: int, pair) -> dict:
    found = rows.loc[[(series, nodes, pair.bytes, pair.run_fast)]].iloc[0]
    point = {
        "backend": found["backend"],
        "sync": found["sync"],
        "nodes": nodes,
        "bytes": pair.bytes,
    }
    return point | {key: found[key] for key in _VARIANTS if key in found.index}


def one_run_ratios(model) -> pd.DataFrame:
    """Every ring-over-peer speedup whose two series come from one run, size by size, with
    its bootstrap interval (``ci_low``/``ci_high`` NaN where the run kept no samples)."""
    runs = {run.name: run for run in model.inputs.runs}
    rows = model.rows.set_index(["series", "nodes", "bytes", "run"])
    rng = np.random.default_rng(SEED)
    records = []
    for comparison in model.comparisons:
        if not comparison.name.endswith("_vs_peers"):
            continue
        table = comparison.table
        table = table[(table["run_fast"] == table["run_slow"]) & (table["bytes"] > 0)]
        for pair in table.itertuples():
            samples = samples_of(runs[pair.run_fast])
            low = high = np.nan
            if samples is not None:
                fast_us = _calls(samples, _point(rows, pair.fast, pair.nodes_fast, pair))
                slow_us = _calls(samples, _point(rows, pair.slow, pair.nodes_slow, pair))
                if len(fast_us) and len(slow_us):
                    low, high = bootstrap_ratio(fast_us, slow_us, rng)
            records.append(
                {
                    "ours": pair.fast,
                    "peer": pair.slow,
                    "nodes": int(pair.nodes_fast),
                    "bytes": int(pair.bytes),
                    "run": pair.run_fast,
                    "speedup": float(pair.speedup),
                    "ci_low": low,
                    "ci_high": high,
                }
            )
    columns = ["ours", "peer", "nodes", "bytes", "run", "speedup", "ci_low", "ci_high"]
    return pd.DataFrame.from_records(records, columns=columns)


def verdict(low: float, high: float, ours: str, peer: str) -> str:
    """Which side the interval puts ahead, or that it cannot tell."""
    if np.isnan(low):
        return "no interval (no per-call samples)"
    if low > 1:
        return f"{ours} faster"
    if high < 1:
        return f"{peer} faster"
    return "no clear difference"


def sides_of_one(
    rows: pd.DataFrame,
    columns: tuple[str, str, str],
    faster: Callable[[pd.DataFrame, pd.Series, int], str],
    slower: Callable[[pd.DataFrame, pd.Series, int], str],
    neither: str,
) -> list[str]:
    """Phrases for the sizes whose interval lies wholly above 1, and wholly below it.

    ``columns`` names the ratio and its interval's low and high ends; ``faster`` gets the
    rows above 1, the highest of them and the number of rows, ``slower`` the rows below 1,
    the lowest and the number of rows; ``neither`` stands alone when no interval clears 1.
    """
    ratio, low, high = columns
    above, below = rows[rows[low] > 1], rows[rows[high] < 1]
    parts = []
    if not above.empty:
        parts.append(faster(above, above.loc[above[ratio].idxmax()], len(rows)))
    if not below.empty:
        parts.append(slower(below, below.loc[below[ratio].idxmin()], len(rows)))
    return parts or [neither]
