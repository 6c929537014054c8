"""The report's one-run intervals draw each series' own timed calls, also when one backend
measured several series in the run (algorithms, executors)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from ring.report.intervals import _calls, _point

ROW_KEY = ["series", "nodes", "bytes", "run"]


def _run():
    """A run of two cpu executors and a peer at one size: their calls differ 4x."""
    rows, samples = [], []
    series = [
        ("cpu pairwise", "cpu", "pairwise", "ring", "nodes", 4194304, 14.0),
        ("cpu pairwise slices", "cpu", "pairwise", "ring", "slices", 4194304, 3.5),
        ("numpy-direct", "numpy-direct", "none", np.nan, np.nan, np.nan, 1.8),
    ]
    for name, backend, sync, algorithm, executor, inline, us in series:
        base = {"backend": backend, "sync": sync, "nodes": 2, "bytes": 1024}
        variant = {"algorithm": algorithm, "executor": executor, "inline_bytes": inline}
        rows.append({"series": name, "run": "r", **base, **variant, "dtype": "float32"})
        for call in range(5):
            samples.append({**base, **variant, "call": call, "time_us": us + 0.01 * call})
    return pd.DataFrame(rows).set_index(ROW_KEY), pd.DataFrame(samples)


def test_each_series_takes_only_its_own_calls():
    rows, samples = _run()
    pair = SimpleNamespace(bytes=1024, run_fast="r")
    for name, want in (("cpu pairwise", 14.0), ("cpu pairwise slices", 3.5)):
        calls = _calls(samples, _point(rows, name, 2, pair))
        np.testing.assert_allclose(calls, want + 0.01 * np.arange(5))
    # A peer's missing variant columns match its calls' missing ones.
    peer = _calls(samples, _point(rows, "numpy-direct", 2, pair))
    np.testing.assert_allclose(peer, 1.8 + 0.01 * np.arange(5))


def test_samples_without_the_variant_columns_match_on_the_key():
    rows, samples = _run()
    older = samples.drop(columns=["algorithm", "executor", "inline_bytes"])
    pair = SimpleNamespace(bytes=1024, run_fast="r")
    assert len(_calls(older, _point(rows, "cpu pairwise", 2, pair))) == 10
