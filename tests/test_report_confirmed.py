"""The findings' arithmetic on launch sets made by hand: ratios between launches, their
interval, outlier launches, families, oversubscribed sizes and regimes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ring.report.derive.confirmed import OUTLIER_MARGIN, Interval, confirmation, regimes
from ring.report.load import LaunchSet, Run

KEYS = ("backend", "sync", "algorithm", "graphs", "inline_bytes", "executor", "buffers")
PICK = {"backend": "cpu", "sync": "pairwise", "algorithm": "reduce-broadcast",
        "graphs": "", "inline_bytes": "4194304", "executor": "slices", "buffers": ""}  # fmt: skip
TWIN = {**PICK, "executor": "nodes"}
PEER = {"backend": "numpy-direct", "sync": "none", "algorithm": "numpy-direct",
        "graphs": "", "inline_bytes": "", "executor": "", "buffers": ""}  # fmt: skip
ENV = {"cores": 2, "usable_cores": 2}


def _row(series: dict, nbytes: int, time_us: float, per_core: float = 0.5) -> dict:
    return {**series, "nodes": 2, "dtype": "float32", "op": "sum", "bytes": nbytes,
            "time_us": time_us, "threads_per_core": per_core, "inline": 1.0}  # fmt: skip


def _set(times: dict[int, dict[int, tuple]], contenders=(TWIN,), per_core=0.5) -> LaunchSet:
    """``times``: launch -> bytes -> (pick, twin, peer) µs."""
    launches = []
    for launch, sizes in times.items():
        rows = []
        for nbytes, (pick, twin, peer) in sizes.items():
            rows += [_row(PICK, nbytes, pick, per_core), _row(PEER, nbytes, peer, 0)]
            if twin is not None:
                rows.append(_row(TWIN, nbytes, twin, per_core))
        meta = {"environment": ENV, "config": {"order": "forward", "iters": 20}}
        launches.append(
            Run(f"set#{launch}", Path("set.csv"), pd.DataFrame(rows), meta, None, launch)
        )
    picks = [
        {"nodes": "2", "dtype": "float32", "op": "sum", "bytes": str(b), "pick": dict(PICK),
         "contenders": [dict(c) for c in contenders]}
        for b in next(iter(times.values()))
    ]  # fmt: skip
    finalists = {"kind": "finalists", "series": [PICK, *contenders, PEER], "picks": picks,
                 "screen": "results/cpu/algorithms_n2_float32.csv"}  # fmt: skip
    return LaunchSet("set", Path("set.csv"), {"launches": []}, launches, finalists)


def test_the_ratio_is_the_median_of_the_launches_and_its_interval_their_range():
    times = {k: {1024: (10.0, 20.0, peer)} for k, peer in enumerate([11.0, 13.0, 12.0], 1)}
    point = confirmation(_set(times), []).points[0]
    assert point.launch_ratios == {1: 1.1, 2: 1.3, 3: 1.2}
    assert (point.ratio.point, point.ratio.low, point.ratio.high) == (1.2, 1.1, 1.3)
    assert point.ratio.launches == 3 and point.ratio.confidence == 0.75
    assert point.verdict == "ours" and point.family == [point.pick]


def test_an_interval_that_misses_its_point_cannot_exist():
    with pytest.raises(ValueError, match="misses its point"):
        Interval(2.0, 1.0, 1.5, 5)


def test_a_launch_far_outside_the_others_is_set_aside_and_said_to_be():
    peers = [11.0, 11.5, 12.0, 11.2, 30.0]
    times = {k: {1024: (10.0, None, p)} for k, p in enumerate(peers, 1)}
    point = confirmation(_set(times, contenders=()), []).points[0]
    assert set(point.outliers) == {5} and "launch 5" in point.outliers[5]
    assert point.ratio.launches == 4 and point.ratio.high == pytest.approx(1.2)
    # A spread no wider than the others' own (plus the margin) is kept.
    near = 12.0 * OUTLIER_MARGIN * 1.05
    times = {k: {1024: (10.0, None, p)} for k, p in enumerate([11.0, 11.5, 12.0, 11.2, near], 1)}
    assert confirmation(_set(times, contenders=()), []).points[0].outliers == {}


def test_a_series_as_fast_in_some_launch_joins_the_family_and_one_always_slower_does_not():
    tied = {k: {1024: (10.0, twin, 20.0)} for k, twin in enumerate([9.0, 11.0, 10.5], 1)}
    point = confirmation(_set(tied), []).points[0]
    assert [r["executor"] for r in point.family] == ["slices", "nodes"]
    slower = {k: {1024: (10.0, 12.0, 20.0)} for k in (1, 2, 3)}
    assert len(confirmation(_set(slower), []).points[0].family) == 1


def test_an_oversubscribed_size_is_set_aside_whole():
    times = {k: {1024: (10.0, None, 20.0)} for k in (1, 2, 3)}
    point = confirmation(_set(times, contenders=(), per_core=2.0), []).points[0]
    assert point.ratio is None and point.verdict == "aside" and "oversubscribed" in point.aside


def test_regimes_join_consecutive_sizes_of_one_verdict_and_family():
    sizes = {1024: 20.0, 4096: 20.0, 16384: 8.0, 65536: 9.0, 262144: 20.0}
    times = {k: {b: (10.0, None, peer * (1 + k / 100)) for b, peer in sizes.items()}
             for k in (1, 2, 3)}  # fmt: skip
    found = regimes(confirmation(_set(times, contenders=()), []))
    assert [(r.verdict, [p.bytes for p in r.points]) for r in found] == [
        ("ours", [1024, 4096]),
        ("peer", [16384, 65536]),
        ("ours", [262144]),
    ]


def test_the_why_says_when_the_model_misses_the_measured_time():
    from ring.report.words.findings import shares_text

    shares = {"alpha": 0.7, "beta": 0.2, "gamma": 0.1, "per_node": 0.0}
    close = shares_text(shares, (0.9, 1.2))
    assert "steps (α) 70 %" in close and "rough guide" not in close
    far = shares_text(shares, (0.05, 0.9))
    assert "predicts 0.0500×–0.900× the measured time here" in far and "rough guide" in far
    assert "no fit" in shares_text(None, None)
