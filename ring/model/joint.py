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
    above_weight,
    oversubscription,
    predict_seconds,
    terms,
    working_set,
)
from .data import Point
from .solve import identifiable, robust_nnls, robust_nnls_loaded

__all__ = [
    "CROWDED",
    "FORM",
    "FORMS",
    "AlgorithmFactors",
    "Settings",
    "determines",
    "factor_key",
    "factors_for",
    "fit_points",
    "predict_point",
]

AlgorithmFactors = Mapping[str, Factors]
THEORY: dict[str, Factors] = {}
# The per-algorithm factors' forms (ring.model.efficiency): none, one on the whole time, or
# κ on the steps and η on the bytes apart (the one kept).
FORMS = ("theory", "time", "split")
FORM = "split"


# What an algorithm's factors are called at more nodes than cores (ring.model.efficiency).
CROWDED = " crowded"


def factor_key(algorithm: str, nodes_per_core: float) -> str:
    """The name of the factors a row at ``nodes_per_core`` is priced with: the algorithm's
    own at p <= 1, its crowded ones past one node per core."""
    return algorithm + CROWDED if nodes_per_core > 1 else algorithm


def factors_for(factors: AlgorithmFactors, algorithm: str, nodes_per_core: float) -> Factors:
    """The factors of ``algorithm`` at ``nodes_per_core``: its regime's, else the other
    regime's where the group measured only that one, else the theory's (1, 1)."""
    for key in (factor_key(algorithm, nodes_per_core), algorithm, algorithm + CROWDED):
        found = factors.get(key)
        if found is not None:
            return found
    return Factors()


class Settings(NamedTuple):
    """How a group's rows are fitted: what every step of the fit (ring.model.fit,
    ring.model.efficiency) takes alike."""

    shared: bool  # the nodes share one bus: the per-byte terms count every node's bytes
    gamma: float | None = None  # γ held at this; None: fitted
    knee: float = math.inf  # β changes past this working set (inf: one β at every size)
    sigma: float | None = 0.0  # σ held at this; None: fitted
    form: str = FORM  # the per-algorithm factors' form
    inline: bool = False  # the rows ran inline: moves and a per-node term (ring.model.costs)
    ramp: float = 1.0  # β goes to β above over the working sets knee..knee·ramp (1: a step)


def load(points: list[Point]) -> np.ndarray:
    """p - 1 of each point where above 0: what σ multiplies."""
    return np.array([max(0.0, p.nodes_per_core - 1.0) for p in points])


def design(
    points: list[Point], shared: bool, factors: AlgorithmFactors = THEORY, inline: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Multipliers of (α, β, γ, per_node) per point (its algorithm's factors applied to the
    first three), the measured seconds, and the working sets."""
    rows = []
    for p in points:
        steps, link, reduce, fixed = terms(
            p.algorithm, p.nodes, p.nbytes, shared, p.group_size, p.segment_bytes, inline
        )
        scale = factors_for(factors, p.algorithm, p.nodes_per_core)
        rows.append((scale.steps * steps, scale.bytes * link, scale.bytes * reduce, fixed))
    sets = [working_set(p.nodes, p.nbytes, shared) for p in points]
    return np.array(rows, dtype=float), np.array([p.seconds for p in points]), np.array(sets)


def split(columns: np.ndarray, sets: np.ndarray, knee: float, ramp: float = 1.0) -> np.ndarray:
    """The β column split in two at the knee (over its ramp): (α, β below, β above, γ,
    per_node)."""
    above = np.array([above_weight(s, knee, ramp) for s in sets], dtype=float)
    link = columns[:, 1]
    return np.column_stack(
        [columns[:, 0], link * (1 - above), link * above, columns[:, 2], columns[:, 3]]
    )


# The columns of split's output, by the Params field each multiplies.
COLUMNS = ("alpha", "beta", "beta_above", "gamma", "per_node")


def _params(
    names: list[str], values, gamma: float | None, knee: float, sigma: float, ramp: float
) -> Params:
    """Params from the fitted ``values`` of the columns ``names`` (the others 0, γ held)."""
    found = dict.fromkeys(COLUMNS, 0.0) | {n: float(v) for n, v in zip(names, values, strict=True)}
    if gamma is not None:
        found["gamma"] = gamma
    return Params(knee=knee, sigma=float(sigma), ramp=ramp, **found)


def fit_points(
    points: list[Point], settings: Settings, factors: AlgorithmFactors = THEORY
) -> Params:
    """α, β, γ (and β past the knee, and per_node inline) from these points; γ and σ fitted
    where ``settings`` leaves them None, else held; each algorithm's terms scaled by its
    ``factors`` (absent: the theory's, 1)."""
    if not points:
        raise ModelInputError("no data to fit")
    _, gamma, knee, sigma, _, _, ramp = settings
    names, chosen, columns, measured = _fitted_columns(points, settings, factors)
    held = columns[:, COLUMNS.index("gamma")] * (gamma or 0.0)
    if sigma is None:
        # σ scales the whole call, so it multiplies γ's part too.
        values, fitted = robust_nnls_loaded(chosen, measured, load(points), held)
        return _params(names, values, gamma, knee, fitted, ramp)
    # A held σ divides out: the relative residuals are the same either way.
    measured = measured / np.array([oversubscription(sigma, p.nodes_per_core) for p in points])
    measured = measured - held
    keep = measured > 0  # rows the fixed γ alone explains say nothing about α and β
    if not keep.any():
        return _params([], [], gamma, knee, sigma, ramp)
    return _params(names, robust_nnls(chosen[keep], measured[keep]), gamma, knee, sigma, ramp)


def _fitted_columns(points: list[Point], settings: Settings, factors: AlgorithmFactors) -> tuple:
    """The names and columns of the parameters :func:`fit_points` fits, every column, and
    the measured times."""
    shared, gamma, knee, _, _, inline, ramp = settings
    rows, measured, sets = design(points, shared, factors, inline)
    columns = split(rows, sets, knee, ramp)
    names = [n for n in COLUMNS if (n != "gamma" or gamma is None) and (n != "per_node" or inline)]
    return names, columns[:, [COLUMNS.index(n) for n in names]], columns, measured


def determines(
    mine: list[Point], points: list[Point], settings: Settings, factors: AlgorithmFactors
) -> bool:
    """Whether the rows ``mine`` of ``points`` alone determine every parameter that
    :func:`fit_points` fits and ``points`` bear on (a column no row reaches, such as β past
    a knee no size passes, is left at 0 either way).  One algorithm's rows may not: the
    ring's bytes split between β and γ in the same ratio at every N, and a fitted σ needs
    rows past one node per core."""
    if not mine or (settings.sigma is None and not any(p.nodes_per_core > 1 for p in mine)):
        return False
    _, chosen, _, measured = _fitted_columns(mine, settings, factors)
    _, every, _, _ = _fitted_columns(points, settings, factors)
    return identifiable(chosen[:, np.any(every != 0, axis=0)], measured)


def predict_point(
    params: Params,
    point: Point,
    shared: bool,
    factors: AlgorithmFactors = THEORY,
    inline: bool = False,
) -> float:
    return predict_seconds(
        params,
        point.algorithm,
        point.nodes,
        point.nbytes,
        shared=shared,
        nodes_per_core=point.nodes_per_core,
        group_size=point.group_size,
        segment_bytes=point.segment_bytes,
        factors=factors_for(factors, point.algorithm, point.nodes_per_core),
        inline=inline,
    )
