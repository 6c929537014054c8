"""Percentile bootstrap of medians over timed calls: the one place both the report's
ratio intervals (:mod:`ring.report.intervals`) and the model's ``check-auto`` draw them.

Each series' calls are resampled with replacement and the median recomputed, :data:`DRAWS`
times, from a generator the caller seeds, so a report or a check is reproducible.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DRAWS", "LEVEL", "bootstrap_ratio", "percentile_interval", "resampled_medians"]

DRAWS = 2000
LEVEL = 0.95


def resampled_medians(calls: np.ndarray, rng: np.random.Generator, draws: int = DRAWS):
    """``draws`` medians of ``calls`` resampled with replacement."""
    calls = np.asarray(calls, dtype=np.float64)
    if calls.ndim != 1 or len(calls) == 0:
        raise ValueError("resampled_medians needs a non-empty 1-D array of timed calls")
    return np.median(calls[rng.integers(0, len(calls), (draws, len(calls)))], axis=1)


def percentile_interval(values: np.ndarray) -> tuple[float, float]:
    """(low, high) holding :data:`LEVEL` of ``values``, the same share cut from each tail."""
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_ratio(
    fast_us: np.ndarray, slow_us: np.ndarray, rng: np.random.Generator, draws: int = DRAWS
) -> tuple[float, float]:
    """(low, high) of median(slow) / median(fast) at :data:`LEVEL`."""
    fast = resampled_medians(fast_us, rng, draws)
    slow = resampled_medians(slow_us, rng, draws)
    return percentile_interval(slow / fast)
