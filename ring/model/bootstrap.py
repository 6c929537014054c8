"""Percentile bootstrap of medians over timed calls: how the model's ``check-auto`` draws
the interval of a ratio of two series measured in one run.

:func:`scipy.stats.bootstrap` resamples each series' calls with replacement (the series
apart, in the order given) :data:`DRAWS` times from a generator the caller seeds, so a
report or a check is reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import bootstrap

__all__ = ["DRAWS", "LEVEL", "bootstrap_ratio", "percentile_bootstrap"]

DRAWS = 2000
LEVEL = 0.95


def _calls(calls) -> np.ndarray:
    """One series as scipy takes it: a non-empty 1-D float array of at least two calls.  A
    single call is given twice: every resample of it is that call either way, and scipy
    refuses samples of one."""
    calls = np.asarray(calls, dtype=np.float64)
    if calls.ndim != 1 or len(calls) == 0:
        raise ValueError("the bootstrap needs non-empty 1-D arrays of timed calls")
    return np.repeat(calls, 2) if len(calls) == 1 else calls


def percentile_bootstrap(
    series: Sequence[Sequence[float] | np.ndarray],
    statistic: Callable[..., np.ndarray],
    rng: np.random.Generator,
    draws: int = DRAWS,
) -> tuple[float, float]:
    """(low, high) at :data:`LEVEL` of ``statistic(*series, axis=-1)`` (vectorised over
    resamples), each series resampled on its own."""
    result = bootstrap(
        tuple(_calls(s) for s in series),
        statistic,
        n_resamples=draws,
        method="percentile",
        confidence_level=LEVEL,
        paired=False,
        vectorized=True,
        rng=rng,
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _ratio_of_medians(fast: np.ndarray, slow: np.ndarray, axis: int) -> np.ndarray:
    return np.median(slow, axis=axis) / np.median(fast, axis=axis)


def bootstrap_ratio(
    fast_us: np.ndarray, slow_us: np.ndarray, rng: np.random.Generator, draws: int = DRAWS
) -> tuple[float, float]:
    """(low, high) of median(slow) / median(fast) at :data:`LEVEL`."""
    return percentile_bootstrap((fast_us, slow_us), _ratio_of_medians, rng, draws)
