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

from dataclasses import asdict, dataclass, field

import numpy as np

from .costs import ModelInputError, Params, coefficients, design_row, predict_seconds
from .data import ADD_TRAFFIC, Group, Point
from .solve import identifiable, robust_nnls

__all__ = ["BOOTSTRAP_ROUNDS", "Fit", "HeldOut", "fit_group", "fit_points", "held_out"]

BOOTSTRAP_ROUNDS = 200
CONFIDENCE = 0.95
PARAMETERS = ("alpha", "beta", "gamma")


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
    notes: list[str] = field(default_factory=list)

    def predict(self, algorithm: str, nodes: int, nbytes: int, **options: int) -> float:
        """Seconds of one allreduce on this machine (any algorithm of the table)."""
        return predict_seconds(self.params, algorithm, nodes, nbytes, shared=self.shared, **options)

    def to_json(self) -> dict:
        document = asdict(self)
        document["params"] = dict(zip(PARAMETERS, self.params, strict=True))
        document["held_out"] = [{**asdict(h), "error": h.error} for h in self.held_out]
        return document

    @classmethod
    def from_json(cls, document: dict) -> Fit:
        try:
            return cls(
                key={str(k): str(v) for k, v in document["key"].items()},
                shared=bool(document["shared"]),
                params=Params(*(float(document["params"][p]) for p in PARAMETERS)),
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
                notes=list(document.get("notes", [])),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelInputError(f"not a ring.model fit entry ({exc!r})") from None


def _design(points: list[Point], shared: bool) -> tuple[np.ndarray, np.ndarray]:
    rows = [
        design_row(coefficients(p.algorithm, p.nodes, p.nbytes), p.nodes, p.nbytes, shared)
        for p in points
    ]
    return np.array(rows, dtype=float), np.array([p.seconds for p in points])


def fit_points(points: list[Point], shared: bool, gamma: float | None) -> Params:
    """α, β, γ from these points; γ fitted when ``gamma`` is None, else held at it."""
    if not points:
        raise ModelInputError("no data to fit")
    design, measured = _design(points, shared)
    if gamma is None:
        return Params(*robust_nnls(design, measured))
    rest = measured - design[:, 2] * gamma
    # Rows whose time the fixed γ alone already exceeds say nothing about α and β.
    keep = rest > 0
    if not keep.any():
        return Params(0.0, 0.0, gamma)
    alpha, beta = robust_nnls(design[keep, :2], rest[keep])
    return Params(float(alpha), float(beta), gamma)


def _gamma_choice(group: Group) -> tuple[float | None, str]:
    design, measured = _design(group.points, group.shared)
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


def _bootstrap(group: Group, gamma: float | None, rng: np.random.Generator) -> np.ndarray:
    """Parameters refitted on sizes drawn with replacement (all rows of a size together)."""
    sizes = sorted({p.nbytes for p in group.points})
    by_size = {s: [p for p in group.points if p.nbytes == s] for s in sizes}
    draws = []
    for _ in range(BOOTSTRAP_ROUNDS):
        chosen = rng.choice(len(sizes), size=len(sizes), replace=True)
        points = [p for i in chosen for p in by_size[sizes[i]]]
        draws.append(fit_points(points, group.shared, gamma))
    return np.array(draws)


def held_out(points: list[Point], shared: bool, gamma: float | None) -> list[HeldOut]:
    """Fit on every other size (1st, 3rd, ...), predict the sizes in between."""
    sizes = sorted({p.nbytes for p in points})
    train = set(sizes[0::2])
    test = [p for p in points if p.nbytes not in train]
    if not test:
        return []
    params = fit_points([p for p in points if p.nbytes in train], shared, gamma)
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
    params = fit_points(group.points, group.shared, gamma)
    draws = _bootstrap(group, gamma, np.random.default_rng(seed))
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail], axis=0)
    interval = {name: (float(low[i]), float(high[i])) for i, name in enumerate(PARAMETERS)}
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
