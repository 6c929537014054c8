"""Robust, non-negative least squares in relative error, for a handful of parameters.

Times span five decades over a sweep, so residuals are relative (each row weighted by
1/measured): an absolute fit would be decided by the largest sizes alone.  Outliers (a size
that hit a cache knee or a noisy neighbour) are down-weighted by Huber's function, iterated
(IRLS) with the scale re-estimated from the median absolute residual each round (at
least :data:`MIN_SPREAD`).  Costs are
non-negative: each round is a weighted non-negative least-squares problem, solved by
:func:`scipy.optimize.nnls` where the free optimum is not feasible.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import nnls

__all__ = ["HUBER_K", "identifiable", "robust_nnls", "robust_nnls_loaded"]

HUBER_K = 1.345  # 95 % efficiency at the normal distribution
IRLS_ROUNDS = 50
# The residual scale is not taken below this: where most rows fit to a fraction of a percent
# (latency-bound sizes), a smaller scale would call every bandwidth-bound size an outlier.
MIN_SPREAD = 0.05
RANK_TOLERANCE = 1e-9
# The alternation of robust_nnls_loaded moves two coupled halves: more rounds than IRLS alone.
LOADED_ROUNDS = 200


def _scaled(design: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows times sqrt(weight), columns scaled to unit norm (and the scales)."""
    rows = design * np.sqrt(weights)[:, None]
    scale = np.linalg.norm(rows, axis=0)
    scale[scale == 0] = 1.0
    return rows / scale, scale


def identifiable(design: np.ndarray, measured: np.ndarray) -> bool:
    """Whether every column's parameter is determined by these rows (full column rank)."""
    rows, _ = _scaled(design, 1.0 / measured**2)
    singular = np.linalg.svd(rows, compute_uv=False)
    return bool(singular.size == design.shape[1] and singular[-1] > RANK_TOLERANCE * singular[0])


def _nnls(design: np.ndarray, target: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """min sum w·(target - design·x)^2 over x >= 0: the free least-squares optimum where it
    is feasible, else scipy's Lawson–Hanson NNLS.

    Columns are scaled to unit norm first: α, β and γ differ by five decades, and NNLS's
    active-set tolerance is absolute.  Where columns are collinear (an algorithm whose step
    and byte terms are proportional over its rows) every split of their weight fits alike:
    the free optimum is then the minimum-norm one, which shares the weight, where NNLS would
    set one column to 0 chosen by rounding, so the fit would depend on the machine."""
    rows, scale = _scaled(design, weights)
    rhs = target * np.sqrt(weights)
    solution, *_ = np.linalg.lstsq(rows, rhs, rcond=None)
    if np.any(solution < 0):
        solution, _ = nnls(rows, rhs)
    return solution / scale


def robust_nnls(design: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Huber-IRLS fit of ``measured ≈ design·x`` (x >= 0) in relative residuals."""
    base = 1.0 / measured**2
    weights = base.copy()
    solution = _nnls(design, measured, weights)
    for _ in range(IRLS_ROUNDS):
        relative = (measured - design @ solution) / measured
        spread = 1.4826 * float(np.median(np.abs(relative - np.median(relative))))
        cut = HUBER_K * max(spread, MIN_SPREAD)
        huber = np.minimum(1.0, cut / np.maximum(np.abs(relative), 1e-300))
        updated = _nnls(design, measured, base * huber)
        converged = np.allclose(updated, solution, rtol=1e-9, atol=0)
        solution = updated
        if converged:
            break
    return solution


def _load_factor(model: np.ndarray, measured: np.ndarray, load: np.ndarray, weights) -> float:
    """σ >= 0 that best scales ``model`` by (1 + σ·load) onto ``measured`` (weighted)."""
    lifted = load * model
    denominator = float(np.sum(weights * lifted**2))
    if denominator <= 0:
        return 0.0
    return max(0.0, float(np.sum(weights * lifted * (measured - model))) / denominator)


def robust_nnls_loaded(
    design: np.ndarray, measured: np.ndarray, load: np.ndarray, offset: np.ndarray
) -> tuple[np.ndarray, float]:
    """Huber-IRLS fit of ``measured ≈ (1 + σ·load)·(design·x + offset)``, x >= 0, σ >= 0.

    The model is bilinear, but each half is linear once the other is held: every round
    solves x with σ held, then σ in closed form with x held, then re-weights.  The rows
    with no load (nodes <= cores) pin x on their own, so the alternation settles in a few
    rounds.  ``offset`` is the part of each row's time a fixed parameter (γ) explains.
    """
    base = 1.0 / measured**2
    huber = np.ones_like(measured)
    sigma, solution = 0.0, np.zeros(design.shape[1])
    for _ in range(LOADED_ROUNDS):
        scale = 1.0 + sigma * load
        target = measured - scale * offset
        # Rows the fixed part alone explains say nothing about x.
        weights = base * huber * (target > 0)
        updated = _nnls(design * scale[:, None], target, weights)
        model = design @ updated + offset
        updated_sigma = _load_factor(model, measured, load, base * huber)
        relative = ((1.0 + updated_sigma * load) * model - measured) / measured
        spread = 1.4826 * float(np.median(np.abs(relative - np.median(relative))))
        cut = HUBER_K * max(spread, MIN_SPREAD)
        huber = np.minimum(1.0, cut / np.maximum(np.abs(relative), 1e-300))
        converged = np.allclose(updated, solution, rtol=1e-9, atol=0) and math.isclose(
            updated_sigma, sigma, rel_tol=1e-9
        )
        solution, sigma = updated, updated_sigma
        if converged:
            break
    return solution, sigma
