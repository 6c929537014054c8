"""α, β, γ fitted from a sweep, with bootstrap intervals and a held-out check.

One set of parameters per group (machine, backend, sync, dtype, op): α per step, β per byte
on the link or bus, γ per byte reduced are the machine's; an algorithm only sets how many of
each it pays (ring.model.costs).  So all algorithms measured in a group are fitted jointly.
That is also the only way β and γ can be told apart: every algorithm whose b/c ratio is the
same at every N (ring, Rabenseifner at powers of two, hierarchical, direct: 2) gives one
slope per N, b·β + c·γ, and never the two separately.  When the rows leave them unidentified
γ is fixed from the reduction kernel's ceiling the harness measured in the same run (3 bytes
of traffic per byte reduced), and the fit says so; without a ceiling γ is fixed at 0 and β
carries the reduction too.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from .costs import (
    ModelInputError,
    Params,
    coefficients,
    design_row,
    predict_seconds,
    working_set,
)
from .data import ADD_TRAFFIC, Group, Point
from .solve import identifiable, robust_nnls

__all__ = ["BOOTSTRAP_ROUNDS", "Fit", "HeldOut", "fit_group", "fit_points", "held_out"]

BOOTSTRAP_ROUNDS = 200
CONFIDENCE = 0.95
PARAMETERS = ("alpha", "beta", "gamma", "knee", "beta_above")
INTERVALS = ("alpha", "beta", "gamma", "beta_above")
KNEE_MIN_SIZES = 3
RESOLUTION = 1e-4


@dataclass(frozen=True)
class HeldOut:
    algorithm: str
    nodes: int
    nbytes: int
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Relative error of the prediction, (predicted - measured) / measured."""
        return self.predicted_s / self.measured_s - 1.0


@dataclass
class Fit:
    key: dict[str, str]
    shared: bool
    params: Params
    interval: dict[str, tuple[float, float]]
    gamma_source: str
    algorithms: list[str]
    nodes: list[int]
    sizes: list[int]
    held_out: list[HeldOut] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def predict(self, algorithm: str, nodes: int, nbytes: int, **options: int) -> float:
        """Seconds of one allreduce on this machine (any algorithm of the table)."""
        return predict_seconds(self.params, algorithm, nodes, nbytes, shared=self.shared, **options)

    def to_json(self) -> dict:
        document = asdict(self)
        document["params"] = dict(zip(PARAMETERS, self.params, strict=True))
        if math.isinf(self.params.knee):
            document["params"]["knee"] = None  # JSON has no infinity
        document["held_out"] = [{**asdict(h), "error": h.error} for h in self.held_out]
        return document

    @classmethod
    def from_json(cls, document: dict) -> Fit:
        try:
            knee = document["params"]["knee"]
            return cls(
                key={str(k): str(v) for k, v in document["key"].items()},
                shared=bool(document["shared"]),
                params=Params(
                    alpha=float(document["params"]["alpha"]),
                    beta=float(document["params"]["beta"]),
                    gamma=float(document["params"]["gamma"]),
                    knee=math.inf if knee is None else float(knee),
                    beta_above=float(document["params"]["beta_above"]),
                ),
                interval={k: (float(v[0]), float(v[1])) for k, v in document["interval"].items()},
                gamma_source=str(document["gamma_source"]),
                algorithms=[str(a) for a in document["algorithms"]],
                nodes=[int(n) for n in document["nodes"]],
                sizes=[int(s) for s in document["sizes"]],
                held_out=[
                    HeldOut(**{k: v for k, v in h.items() if k != "error"})
                    for h in document.get("held_out", [])
                ],
                sources=list(document.get("sources", [])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelInputError(f"not a ring.model fit entry ({exc!r})") from None


def _design(points: list[Point], shared: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Multipliers of (α, β, γ) per point, the measured seconds, and the working sets."""
    rows = [
        design_row(coefficients(p.algorithm, p.nodes, p.nbytes), p.nodes, p.nbytes, shared)
        for p in points
    ]
    sets = [working_set(p.nodes, p.nbytes, shared) for p in points]
    return np.array(rows, dtype=float), np.array([p.seconds for p in points]), np.array(sets)


def _split(design: np.ndarray, sets: np.ndarray, knee: float) -> np.ndarray:
    """The β column split in two at the knee: (α, β below, β above, γ)."""
    below = sets <= knee
    link = design[:, 1]
    return np.column_stack([design[:, 0], link * below, link * ~below, design[:, 2]])


def fit_points(
    points: list[Point], shared: bool, gamma: float | None, knee: float = math.inf
) -> Params:
    """α, β, γ (and β past ``knee``) from these points; γ fitted when ``gamma`` is None."""
    if not points:
        raise ModelInputError("no data to fit")
    design, measured, sets = _design(points, shared)
    columns = _split(design, sets, knee)
    if gamma is not None:
        measured = measured - columns[:, 3] * gamma
        keep = measured > 0  # rows the fixed γ alone explains say nothing about α and β
        if not keep.any():
            return Params(0.0, 0.0, gamma, knee, 0.0)
        alpha, below, above = robust_nnls(columns[keep, :3], measured[keep])
        return Params(float(alpha), float(below), gamma, knee, float(above))
    alpha, below, above, fitted = robust_nnls(columns, measured)
    return Params(float(alpha), float(below), float(fitted), knee, float(above))


def _bic(points: list[Point], shared: bool, params: Params, extra: int) -> float:
    """Bayesian information criterion of the relative residuals (lower is better)."""
    errors = [
        predict_seconds(params, p.algorithm, p.nodes, p.nbytes, shared=shared) / p.seconds - 1
        for p in points
    ]
    # Relative errors under RESOLUTION are rounding, not a better fit.
    rss = max(float(np.sum(np.square(errors))), len(points) * RESOLUTION**2)
    return len(points) * math.log(rss / len(points)) + (3 + extra) * math.log(len(points))


def choose_knee(points: list[Point], shared: bool, gamma: float | None) -> float:
    """The working set past which β changes, or inf for none.

    On the reference CPU the per-byte cost doubles once N·n passes the last-level cache
    (32 MiB), which one β cannot follow (it missed by 40-47 % past it); the MPI ring's
    per-byte cost changes there too, the other way.

    Every boundary between two working sets with at least ``KNEE_MIN_SIZES`` sizes on each
    side is tried; one is kept only if it lowers the BIC (two more parameters: the knee and
    the second β) below the single-β model's.
    """
    sets = sorted({working_set(p.nodes, p.nbytes, shared) for p in points})
    best_knee = math.inf
    best = _bic(points, shared, fit_points(points, shared, gamma), 0)
    for i in range(KNEE_MIN_SIZES - 1, len(sets) - KNEE_MIN_SIZES):
        knee = math.sqrt(sets[i] * sets[i + 1])  # between the two, on the log scale
        score = _bic(points, shared, fit_points(points, shared, gamma, knee), 2)
        if score < best:
            best, best_knee = score, knee
    return best_knee


def _gamma_choice(group: Group) -> tuple[float | None, str]:
    design, measured, _ = _design(group.points, group.shared)
    if identifiable(design, measured):
        return None, "fitted jointly (the algorithms' b/c ratios differ, so β and γ separate)"
    if group.add_ceilings_GBps:
        ceiling = float(np.mean(group.add_ceilings_GBps))
        return ADD_TRAFFIC / (ceiling * 1e9), (
            f"fixed from the add kernel ceiling measured in the run, {ceiling:.1f} GB/s "
            f"({ADD_TRAFFIC} bytes of traffic per byte reduced): with only "
            f"{', '.join(sorted({p.algorithm for p in group.points}))} measured, b/c is the "
            "same at every N and β, γ cannot be told apart"
        )
    return 0.0, "fixed at 0 (β, γ not identifiable and no ceiling recorded): β includes γ"


def _bootstrap(
    group: Group, gamma: float | None, knee: float, rng: np.random.Generator
) -> np.ndarray:
    """Parameters refitted on sizes drawn with replacement (all rows of a size together),
    the knee held where the full data put it."""
    sizes = sorted({p.nbytes for p in group.points})
    by_size = {s: [p for p in group.points if p.nbytes == s] for s in sizes}
    draws = []
    for _ in range(BOOTSTRAP_ROUNDS):
        chosen = rng.choice(len(sizes), size=len(sizes), replace=True)
        points = [p for i in chosen for p in by_size[sizes[i]]]
        draws.append(fit_points(points, group.shared, gamma, knee))
    return np.array(draws)


def held_out(points: list[Point], shared: bool, gamma: float | None) -> list[HeldOut]:
    """Fit on every other size (1st, 3rd, ...), predict the sizes in between."""
    sizes = sorted({p.nbytes for p in points})
    train = set(sizes[0::2])
    test = [p for p in points if p.nbytes not in train]
    if not test:
        return []
    training = [p for p in points if p.nbytes in train]
    params = fit_points(training, shared, gamma, choose_knee(training, shared, gamma))
    return [
        HeldOut(
            p.algorithm,
            p.nodes,
            p.nbytes,
            p.seconds,
            predict_seconds(params, p.algorithm, p.nodes, p.nbytes, shared=shared),
        )
        for p in sorted(test, key=lambda p: (p.algorithm, p.nodes, p.nbytes))
    ]


def fit_group(group: Group, seed: int = 0) -> Fit:
    """The fit of one group: parameters, 95 % bootstrap intervals, held-out errors."""
    if not group.points:
        raise ModelInputError(f"no data to fit for {group.key}")
    gamma, gamma_source = _gamma_choice(group)
    knee = choose_knee(group.points, group.shared, gamma)
    params = fit_points(group.points, group.shared, gamma, knee)
    draws = _bootstrap(group, gamma, knee, np.random.default_rng(seed))
    tail = (1 - CONFIDENCE) / 2 * 100
    columns = [PARAMETERS.index(name) for name in INTERVALS]
    low, high = np.percentile(draws[:, columns], [tail, 100 - tail], axis=0)
    interval = {name: (float(low[i]), float(high[i])) for i, name in enumerate(INTERVALS)}
    return Fit(
        key=dict(group.key),
        shared=group.shared,
        params=params,
        interval=interval,
        gamma_source=gamma_source,
        algorithms=sorted({p.algorithm for p in group.points}),
        nodes=sorted({p.nodes for p in group.points}),
        sizes=sorted({p.nbytes for p in group.points}),
        held_out=held_out(group.points, group.shared, gamma),
        sources=list(group.sources),
    )
