"""The model's scipy calls give what independent references computed from the definitions
give (tests/reference_solvers.py), on random data and on the committed result data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import reference_solvers

import ring.model.solve as solve
from ring.model.auto_check import _calls_of, ratio_interval
from ring.model.bootstrap import DRAWS, LEVEL, bootstrap_ratio
from ring.model.data import load_groups
from ring.model.fit import fit_group

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = sorted((ROOT / "ring" / "model" / "defaults").iterdir())
# Both NNLS solvers end in a least-squares solve on the same free columns: they agree to
# rounding, far inside the 1e-6 the committed fits are checked to (test_model_auto.py).
NNLS_RTOL = 1e-9
# scipy.stats.bootstrap draws the same resamples from the same generator (each series in
# order, one (draws, calls) block each); only its quantile's arithmetic differs.
BOOTSTRAP_RTOL = 1e-12
# Every committed run with its timed calls (the bootstrap's input).
RUNS = sorted(
    p.with_name(p.name.replace(".samples.csv", ".csv"))
    for p in (ROOT / "results" / "reference").rglob("*.samples.csv")
)


def _committed_groups(folder: Path):
    csvs = sorted(str(p) for p in folder.glob("*.csv") if not p.name.endswith(".samples.csv"))
    groups, _ = load_groups(csvs)
    return groups


@pytest.mark.parametrize("seed", range(20))
def test_scipy_nnls_is_the_best_subset_solution(seed):
    """Random designs whose free optimum has negative parts (columns nearly collinear,
    targets noisy), with random non-zero weights."""
    rng = np.random.default_rng(seed)
    rows, columns = rng.integers(6, 40), rng.integers(1, 6)
    design = rng.uniform(0.1, 1.0, (rows, columns)) * np.logspace(-6, -1, columns)
    design[:, -1] += 0.9 * design[:, 0] * design[0, -1] / design[0, 0]
    target = design @ rng.uniform(-1.0, 2.0, columns) + rng.normal(0, 1e-3, rows)
    weights = rng.uniform(0.5, 2.0, rows)
    got = solve._nnls(design, target, weights)
    want = reference_solvers.nnls_by_subsets(design, target, weights)
    assert np.all(got >= 0)
    np.testing.assert_allclose(got, want, rtol=NNLS_RTOL, atol=1e-12 * np.max(np.abs(want)))


@pytest.mark.slow
@pytest.mark.parametrize("folder", DEFAULTS, ids=lambda p: p.name)
def test_committed_fits_are_the_same_with_either_nnls(folder, monkeypatch):
    """Every default group refitted (no bootstrap) with scipy's NNLS and with the subset
    enumeration: the same parameters, zeros at the same places."""
    monkeypatch.chdir(ROOT)
    for group in _committed_groups(folder):
        library = fit_group(group, draws=0)
        monkeypatch.setattr(solve, "_nnls", reference_solvers.nnls_by_subsets)
        reference = fit_group(group, draws=0)
        monkeypatch.undo()
        monkeypatch.chdir(ROOT)
        key = json.dumps(group.key, sort_keys=True)
        for a, b in zip(library.regimes(), reference.regimes(), strict=True):
            got, want = np.array(a.params), np.array(b.params)
            np.testing.assert_array_equal(got == 0, want == 0, err_msg=key)
            np.testing.assert_allclose(got, want, rtol=NNLS_RTOL, err_msg=key)


@pytest.mark.parametrize("seed", range(5))
def test_scipy_bootstrap_draws_the_reference_ratio_interval(seed):
    rng = np.random.default_rng(seed)
    fast = rng.lognormal(np.log(10.0), 0.3, rng.integers(2, 200))
    slow = rng.lognormal(np.log(15.0), 0.5, rng.integers(2, 200))
    got = bootstrap_ratio(fast, slow, np.random.default_rng(seed))
    want = reference_solvers.bootstrap_ratio(fast, slow, np.random.default_rng(seed), DRAWS, LEVEL)
    np.testing.assert_allclose(got, want, rtol=BOOTSTRAP_RTOL)


@pytest.mark.slow
def test_committed_calls_give_the_reference_intervals():
    """Every (backend, N, size) of every committed run: auto_check's interval (auto against
    the fastest fixed algorithm) and the report's ratio of each algorithm to the first, with
    the generator seeded alike for the reference and the library."""
    checked = 0
    cells = [cell for path in RUNS for cell in sorted(_calls_of(path).items())]
    for key, by_algorithm in cells:
        names = sorted(by_algorithm)
        first = np.asarray(by_algorithm[names[0]])
        for name in names[1:]:
            other = np.asarray(by_algorithm[name])
            got = bootstrap_ratio(first, other, np.random.default_rng(checked))
            want = reference_solvers.bootstrap_ratio(
                first, other, np.random.default_rng(checked), DRAWS, LEVEL
            )
            np.testing.assert_allclose(got, want, rtol=BOOTSTRAP_RTOL, err_msg=str(key))
            checked += 1
        if "auto" in by_algorithm and len(names) > 1:
            fixed = [by_algorithm[n] for n in names if n != "auto"]
            got = ratio_interval(by_algorithm["auto"], fixed, np.random.default_rng(0))
            rng = np.random.default_rng(0)
            medians = [reference_solvers.resampled_medians(f, rng, DRAWS) for f in fixed]
            auto = reference_solvers.resampled_medians(by_algorithm["auto"], rng, DRAWS)
            want = reference_solvers.percentile_interval(auto / np.min(medians, axis=0), LEVEL)
            np.testing.assert_allclose(got, want, rtol=BOOTSTRAP_RTOL, err_msg=str(key))
            checked += 1
    assert checked > 100, checked
