"""Independent references for the model's numerics, written from their definitions and
sharing no code with the library: NNLS by trying every set of free columns, and the
percentile bootstrap of a ratio of medians in plain NumPy (tests/test_reference_solvers.py
checks the library's scipy calls against them)."""

from __future__ import annotations

import itertools

import numpy as np


def scaled(design: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows times sqrt(weight), columns scaled to unit norm (and the scales)."""
    rows = design * np.sqrt(weights)[:, None]
    scale = np.linalg.norm(rows, axis=0)
    scale[scale == 0] = 1.0
    return rows / scale, scale


def nnls_by_subsets(design: np.ndarray, target: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """min sum w·(target - design·x)^2 over x >= 0, by enumerating the sets of columns left
    free (the others held at 0) and keeping the best feasible least-squares solution."""
    rows, scale = scaled(design, weights)
    rhs = target * np.sqrt(weights)
    solution, *_ = np.linalg.lstsq(rows, rhs, rcond=None)
    if np.all(solution >= 0):
        return solution / scale  # the free optimum is feasible, so it is the answer
    best, best_loss = np.zeros(design.shape[1]), float(np.sum(rhs**2))
    columns = range(design.shape[1])
    for size in range(1, design.shape[1] + 1):
        for free in itertools.combinations(columns, size):
            solution, *_ = np.linalg.lstsq(rows[:, free], rhs, rcond=None)
            if np.any(solution < 0):
                continue
            loss = float(np.sum((rhs - rows[:, free] @ solution) ** 2))
            if loss < best_loss:
                best = np.zeros(design.shape[1])
                best[list(free)] = solution
                best_loss = loss
    return best / scale


def resampled_medians(calls: np.ndarray, rng: np.random.Generator, draws: int) -> np.ndarray:
    """``draws`` medians of ``calls`` resampled with replacement."""
    calls = np.asarray(calls, dtype=np.float64)
    return np.median(calls[rng.integers(0, len(calls), (draws, len(calls)))], axis=1)


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """(low, high) holding ``level`` of ``values``, the same share cut from each tail."""
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_ratio(fast, slow, rng, draws: int, level: float) -> tuple[float, float]:
    """Percentile interval of median(slow) / median(fast), each series resampled apart."""
    fast_medians = resampled_medians(fast, rng, draws)
    return percentile_interval(resampled_medians(slow, rng, draws) / fast_medians, level)
