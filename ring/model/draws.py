"""95 % percentile bootstrap intervals of a fit: the group's sizes drawn with replacement
(all rows of a size together) and the parameters and factors refitted on each draw."""

from __future__ import annotations

import numpy as np

from .costs import Factors
from .data import Group
from .efficiency import BOOTSTRAP_ROUNDS as FACTOR_ROUNDS
from .efficiency import fit_with_factors
from .joint import AlgorithmFactors, Settings

__all__ = ["BOOTSTRAP_ROUNDS", "FACTOR_TERMS", "PARAMETERS", "bootstrap", "intervals"]

BOOTSTRAP_ROUNDS = 200
CONFIDENCE = 0.95
PARAMETERS = ("alpha", "beta", "gamma", "knee", "beta_above", "sigma", "per_node", "ramp")
INTERVALS = ("alpha", "beta", "gamma", "beta_above", "sigma", "per_node")
FACTOR_TERMS = Factors._fields


def bootstrap(
    group: Group,
    settings: Settings,
    rng: np.random.Generator,
    start: AlgorithmFactors | None = None,
    names: list[str] | None = None,
    rounds: int = BOOTSTRAP_ROUNDS,
) -> np.ndarray:
    """Parameters, then the (steps, bytes) factors of each of ``names`` (default: the
    group's algorithms) in that order, refitted on sizes drawn with replacement (all rows of
    a size together), the knee held where the full data put it and the factors'
    alternation started where the full data left it."""
    sizes = sorted({p.nbytes for p in group.points})
    algorithms = names if names is not None else sorted({p.algorithm for p in group.points})
    by_size = {s: [p for p in group.points if p.nbytes == s] for s in sizes}
    draws = []
    for _ in range(rounds):
        chosen = rng.choice(len(sizes), size=len(sizes), replace=True)
        points = [p for i in chosen for p in by_size[sizes[i]]]
        params, factors = fit_with_factors(points, settings, start, FACTOR_ROUNDS)
        draws.append([*params, *(x for a in algorithms for x in factors.get(a, Factors()))])
    return np.array(draws)


def intervals(
    draws: np.ndarray, algorithms: list[str]
) -> tuple[dict[str, tuple[float, float]], dict[str, dict[str, tuple[float, float]]]]:
    """95 % percentile intervals of the parameters and of the factors of each of
    ``algorithms`` (the names :func:`bootstrap` drew, in its order)."""
    tail = (1 - CONFIDENCE) / 2 * 100
    draws = draws.copy()
    draws[:, PARAMETERS.index("knee")] = 0.0  # held, and inf where there is none
    draws[:, PARAMETERS.index("ramp")] = 0.0  # held with the knee
    low, high = np.percentile(draws, [tail, 100 - tail], axis=0)
    interval = {
        name: (float(low[i]), float(high[i]))
        for i, name in enumerate(PARAMETERS)
        if name in INTERVALS
    }
    factors: dict[str, dict[str, tuple[float, float]]] = {}
    for k, algorithm in enumerate(algorithms):
        first = len(PARAMETERS) + k * len(FACTOR_TERMS)
        factors[algorithm] = {
            term: (float(low[first + j]), float(high[first + j]))
            for j, term in enumerate(FACTOR_TERMS)
        }
    return interval, factors
