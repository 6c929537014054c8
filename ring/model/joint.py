"""The joint least-squares fit of α, β, γ (and σ) over every algorithm of a group, each
algorithm's rows built from its theoretical coefficients times its measured factors."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from .costs import (
    Factors,
    ModelInputError,
    Params,
    coefficients,
    design_row,
    oversubscription,
    predict_seconds,
    working_set,
)
from .data import Point
from .solve import robust_nnls, robust_nnls_loaded

__all__ = ["FORM", "FORMS", "AlgorithmFactors", "Settings", "fit_points", "predict_point"]

AlgorithmFactors = Mapping[str, Factors]
THEORY: dict[str, Factors] = {}
# The per-algorithm factors' forms (ring.model.efficiency): none, one on the whole time, or
# κ on the steps and η on the bytes apart (the one kept).
FORMS = ("theory", "time", "split")
FORM = "split"


class Settings(NamedTuple):
    """How a group's rows are fitted: what every step of the fit (ring.model.fit,
    ring.model.efficiency) takes alike."""

    shared: bool  # the nodes share one bus: the per-byte terms count every node's bytes
    gamma: float | None = None  # γ held at this; None: fitted
    knee: float = math.inf  # β changes past this working set (inf: one β at every size)
    sigma: float | None = 0.0  # σ held at this; None: fitted
    form: str = FORM  # the per-algorithm factors' form


def load(points: list[Point]) -> np.ndarray:
    """p - 1 of each point where above 0: what σ multiplies."""
    return np.array([max(0.0, p.nodes_per_core - 1.0) for p in points])


def design(
    points: list[Point], shared: bool, factors: AlgorithmFactors = THEORY
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Multipliers of (α, β, γ) per point (its algorithm's factors applied), the measured
    seconds, and the working sets."""
    rows = []
    for p in points:
        coef = coefficients(p.algorithm, p.nodes, p.nbytes, segment_bytes=p.segment_bytes)
        steps, link, reduce = design_row(coef, p.nodes, p.nbytes, shared)
        scale = factors.get(p.algorithm, Factors())
        rows.append((scale.steps * steps, scale.bytes * link, scale.bytes * reduce))
    sets = [working_set(p.nodes, p.nbytes, shared) for p in points]
    return np.array(rows, dtype=float), np.array([p.seconds for p in points]), np.array(sets)


def split(columns: np.ndarray, sets: np.ndarray, knee: float) -> np.ndarray:
    """The β column split in two at the knee: (α, β below, β above, γ)."""
    below = sets <= knee
    link = columns[:, 1]
    return np.column_stack([columns[:, 0], link * below, link * ~below, columns[:, 2]])


def _fit_loaded(
    columns: np.ndarray, measured: np.ndarray, load: np.ndarray, gamma: float | None, knee: float
) -> Params:
    """α, β, γ, σ jointly (σ scales the whole call, so it multiplies γ's part too)."""
    if gamma is None:
        (alpha, below, above, fitted), sigma = robust_nnls_loaded(
            columns, measured, load, np.zeros_like(measured)
        )
        return Params(float(alpha), float(below), float(fitted), knee, float(above), sigma)
    (alpha, below, above), sigma = robust_nnls_loaded(
        columns[:, :3], measured, load, columns[:, 3] * gamma
    )
    return Params(float(alpha), float(below), gamma, knee, float(above), sigma)


def fit_points(
    points: list[Point], settings: Settings, factors: AlgorithmFactors = THEORY
) -> Params:
    """α, β, γ (and β past the knee) from these points; γ and σ fitted where ``settings``
    leaves them None, else held; each algorithm's terms scaled by its ``factors`` (absent:
    the theory's, 1)."""
    if not points:
        raise ModelInputError("no data to fit")
    shared, gamma, knee, sigma, _ = settings
    rows, measured, sets = design(points, shared, factors)
    columns = split(rows, sets, knee)
    if sigma is None:
        return _fit_loaded(columns, measured, load(points), gamma, knee)
    # A held σ divides out: the relative residuals are the same either way.
    measured = measured / np.array([oversubscription(sigma, p.nodes_per_core) for p in points])
    if gamma is not None:
        measured = measured - columns[:, 3] * gamma
        keep = measured > 0  # rows the fixed γ alone explains say nothing about α and β
        if not keep.any():
            return Params(0.0, 0.0, gamma, knee, 0.0, sigma)
        alpha, below, above = robust_nnls(columns[keep, :3], measured[keep])
        return Params(float(alpha), float(below), gamma, knee, float(above), sigma)
    alpha, below, above, fitted = robust_nnls(columns, measured)
    return Params(float(alpha), float(below), float(fitted), knee, float(above), sigma)


def predict_point(
    params: Params, point: Point, shared: bool, factors: AlgorithmFactors = THEORY
) -> float:
    return predict_seconds(
        params,
        point.algorithm,
        point.nodes,
        point.nbytes,
        shared=shared,
        nodes_per_core=point.nodes_per_core,
        segment_bytes=point.segment_bytes,
        factors=factors.get(point.algorithm, Factors()),
    )
