"""Independent references for the model's and the report's numerics: the hand-written
algorithms ring/ used before it called scipy, kept here only to check the library calls
against them on the committed data (tests/test_reference_solvers.py)."""

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

