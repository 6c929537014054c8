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

σ, the slow-down of a call per node per core past one (ring.model.costs), is fitted the
same way jointly with them where the group has rows with no more nodes than cores beside
rows with more: N = 2 on the 2-core reference machine is one and N = 4 the other, so what
N = 4 costs beyond its extra steps and bytes is σ's.  Where every row is on one side σ is
fixed at 0 and the fit says so (``sigma_source``), as for γ.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from ..schedule import default_segment_bytes
from .costs import (
    ModelInputError,
    Params,
    coefficients,
    design_row,
    oversubscription,
    predict_seconds,
    working_set,
)
from .data import ADD_TRAFFIC, Group, Point
from .solve import identifiable, robust_nnls, robust_nnls_loaded

__all__ = ["BOOTSTRAP_ROUNDS", "Fit", "HeldOut", "Host", "fit_group", "fit_points", "held_out"]

BOOTSTRAP_ROUNDS = 200
CONFIDENCE = 0.95
PARAMETERS = ("alpha", "beta", "gamma", "knee", "beta_above", "sigma")
INTERVALS = ("alpha", "beta", "gamma", "beta_above", "sigma")
# What a fit file written before the oversubscription term says about σ when read.
SIGMA_ABSENT = "absent from the fit file (fitted before the oversubscription term): 0"
KNEE_MIN_SIZES = 3
RESOLUTION = 1e-4


class Host(NamedTuple):
    """The machine a prediction is for; a field left None is the fitted machine's."""

    cores: int | None = None  # N over them: the nodes per core σ prices
    caches: tuple[int, int] | None = None  # (L2, last level): ring-segmented's block


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
    sigma_source: str = SIGMA_ABSENT
    cores: int = 0  # of the machine the rows were measured on (0: not recorded)
    caches: tuple[int, int] | None = None  # its (L2, last-level) cache bytes, if recorded

    def nodes_per_core(self, nodes: int, cores: int | None = None) -> float:
        """p of N nodes on ``cores`` cores (default: the fitted machine's); 0 if unknown."""
        if cores is None:
            return nodes / self.cores if self.cores else 0.0
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise ModelInputError(f"cores must be a whole number >= 1, got {cores!r}")
        return nodes / cores

    def predict(
        self, algorithm: str, nodes: int, nbytes: int, host: Host | None = None, **options: int
    ) -> float:
        """Seconds of one allreduce (any algorithm of the table) with N nodes on ``host``
        (default: the machine the fit was measured on)."""
        host = host or Host()
        per_core = self.nodes_per_core(nodes, host.cores) if self.params.sigma else 0.0
        caches = host.caches or self.caches
        if algorithm == "ring-segmented" and "segment_bytes" not in options and caches:
            options["segment_bytes"] = default_segment_bytes(max(nodes, 1), caches)
        return predict_seconds(
            self.params,
            algorithm,
            nodes,
            nbytes,
            shared=self.shared,
            nodes_per_core=per_core,
            **options,
        )

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
                    sigma=float(document["params"].get("sigma", 0.0)),
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
                sigma_source=str(document.get("sigma_source", SIGMA_ABSENT)),
                cores=int(document.get("cores", 0)),
                caches=_pair(document.get("caches")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelInputError(f"not a ring.model fit entry ({exc!r})") from None


def _pair(value: object) -> tuple[int, int] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"caches is {value!r}, not [L2, last-level] bytes")
    return int(value[0]), int(value[1])


def _load(points: list[Point]) -> np.ndarray:
    """p - 1 of each point where above 0: what σ multiplies."""
    return np.array([max(0.0, p.nodes_per_core - 1.0) for p in points])


def _design(points: list[Point], shared: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Multipliers of (α, β, γ) per point, the measured seconds, and the working sets."""
    rows = [
        design_row(
            coefficients(p.algorithm, p.nodes, p.nbytes, segment_bytes=p.segment_bytes),
            p.nodes,
            p.nbytes,
            shared,
        )
        for p in points
    ]
    sets = [working_set(p.nodes, p.nbytes, shared) for p in points]
    return np.array(rows, dtype=float), np.array([p.seconds for p in points]), np.array(sets)


def _split(design: np.ndarray, sets: np.ndarray, knee: float) -> np.ndarray:
    """The β column split in two at the knee: (α, β below, β above, γ)."""
    below = sets <= knee
    link = design[:, 1]
    return np.column_stack([design[:, 0], link * below, link * ~below, design[:, 2]])


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
    points: list[Point],
    shared: bool,
    gamma: float | None,
    knee: float = math.inf,
    sigma: float | None = 0.0,
) -> Params:
    """α, β, γ (and β past ``knee``) from these points; γ fitted when ``gamma`` is None,
    σ fitted when ``sigma`` is None (else held at it)."""
    if not points:
        raise ModelInputError("no data to fit")
    design, measured, sets = _design(points, shared)
    columns = _split(design, sets, knee)
    if sigma is None:
        return _fit_loaded(columns, measured, _load(points), gamma, knee)
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


def _predict_point(params: Params, point: Point, shared: bool) -> float:
    return predict_seconds(
        params,
        point.algorithm,
        point.nodes,
        point.nbytes,
        shared=shared,
        nodes_per_core=point.nodes_per_core,
        segment_bytes=point.segment_bytes,
    )


def _bic(points: list[Point], shared: bool, params: Params, extra: int) -> float:
    """Bayesian information criterion of the relative residuals (lower is better)."""
    errors = [_predict_point(params, p, shared) / p.seconds - 1 for p in points]
    # Relative errors under RESOLUTION are rounding, not a better fit.
    rss = max(float(np.sum(np.square(errors))), len(points) * RESOLUTION**2)
    return len(points) * math.log(rss / len(points)) + (3 + extra) * math.log(len(points))


def choose_knee(
    points: list[Point], shared: bool, gamma: float | None, sigma: float | None = 0.0
) -> float:
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
    best = _bic(points, shared, fit_points(points, shared, gamma, sigma=sigma), 0)
    for i in range(KNEE_MIN_SIZES - 1, len(sets) - KNEE_MIN_SIZES):
        knee = math.sqrt(sets[i] * sets[i + 1])  # between the two, on the log scale
        score = _bic(points, shared, fit_points(points, shared, gamma, knee, sigma), 2)
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


def _sigma_choice(group: Group) -> tuple[float | None, str]:
    most = max(p.nodes_per_core for p in group.points)
    if most <= 1:
        return 0.0, (
            "fixed at 0: no row has more nodes than cores"
            + ("" if most else " (nodes per core not recorded, or the nodes are not CPU workers)")
        )
    if min(p.nodes_per_core for p in group.points) > 1:
        return 0.0, (
            "fixed at 0: every row has more nodes than cores, so α, β, γ include the slow-down"
        )
    return None, (
        f"fitted jointly (rows at <= 1 node per core beside rows at up to {most:.3g} "
        f"on {group.cores or '?'} cores)"
    )


def _bootstrap(
    group: Group,
    gamma: float | None,
    knee: float,
    rng: np.random.Generator,
    sigma: float | None = 0.0,
) -> np.ndarray:
    """Parameters refitted on sizes drawn with replacement (all rows of a size together),
    the knee held where the full data put it."""
    sizes = sorted({p.nbytes for p in group.points})
    by_size = {s: [p for p in group.points if p.nbytes == s] for s in sizes}
    draws = []
    for _ in range(BOOTSTRAP_ROUNDS):
        chosen = rng.choice(len(sizes), size=len(sizes), replace=True)
        points = [p for i in chosen for p in by_size[sizes[i]]]
        draws.append(fit_points(points, group.shared, gamma, knee, sigma))
    return np.array(draws)


def held_out(
    points: list[Point], shared: bool, gamma: float | None, sigma: float | None = 0.0
) -> list[HeldOut]:
    """Fit on every other size (1st, 3rd, ...), predict the sizes in between."""
    sizes = sorted({p.nbytes for p in points})
    train = set(sizes[0::2])
    test = [p for p in points if p.nbytes not in train]
    if not test:
        return []
    training = [p for p in points if p.nbytes in train]
    knee = choose_knee(training, shared, gamma, sigma)
    params = fit_points(training, shared, gamma, knee, sigma)
    return [
        HeldOut(p.algorithm, p.nodes, p.nbytes, p.seconds, _predict_point(params, p, shared))
        for p in sorted(test, key=lambda p: (p.algorithm, p.nodes, p.nbytes))
    ]


def fit_group(group: Group, seed: int = 0) -> Fit:
    """The fit of one group: parameters, 95 % bootstrap intervals, held-out errors."""
    if not group.points:
        raise ModelInputError(f"no data to fit for {group.key}")
    gamma, gamma_source = _gamma_choice(group)
    sigma, sigma_source = _sigma_choice(group)
    knee = choose_knee(group.points, group.shared, gamma, sigma)
    params = fit_points(group.points, group.shared, gamma, knee, sigma)
    draws = _bootstrap(group, gamma, knee, np.random.default_rng(seed), sigma)
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
        held_out=held_out(group.points, group.shared, gamma, sigma),
        sources=list(group.sources),
        sigma_source=sigma_source,
        cores=group.cores,
        caches=group.caches,
    )
