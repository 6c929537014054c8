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

The cpu backend's calls run inline (on the calling thread) up to ``inline_bytes`` per node
and on N threads above it: a group with rows of both is fitted as two regimes, each with
everything above, and a call is priced by the one it runs in (ring.model.regimes).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

import numpy as np

from ..schedule import default_segment_bytes
from . import calibration
from .costs import (
    Factors,
    ModelInputError,
    Params,
    backend_group_size,
    seconds_by_term,
)
from .data import ADD_TRAFFIC, Group, Point
from .draws import BOOTSTRAP_ROUNDS, FACTOR_TERMS, PARAMETERS, bootstrap, intervals
from .efficiency import FORM, fit_with_factors, held_gamma, reference_algorithm
from .joint import Settings, design, factors_for, fit_points, predict_point
from .knee import choose_knee
from .regimes import INLINE, ONE, THREADED, runs_inline, split, threshold
from .solve import identifiable

__all__ = ["BOOTSTRAP_ROUNDS", "Fit", "HeldOut", "Host", "fit_group", "fit_points", "held_out"]

# What a fit file written before the per-algorithm factors says about them when read.
FACTORS_ABSENT = "absent from the fit file (fitted before the per-algorithm factors): 1"
# What a fit file written before the oversubscription term says about σ when read.
SIGMA_ABSENT = "absent from the fit file (fitted before the oversubscription term): 0"


class Host(NamedTuple):
    """The machine a prediction is for; a field left None is the fitted machine's."""

    cores: int | None = None  # N over them: the nodes per core σ prices
    caches: tuple[int, int] | None = None  # (L2, last level): ring-segmented's block
    # The cpu backend's inline_bytes: calls of at most this many bytes per node run inline
    # (ring.model.regimes); None: the threshold the fit's rows ran with.
    inline_bytes: int | None = None


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
    # Per measured algorithm, its (steps, bytes) factors on the theory (ring.model.efficiency)
    # and their 95 % intervals; an algorithm absent here is priced by the theory (1, 1).
    factors: dict[str, Factors] = field(default_factory=dict)
    factor_interval: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    factor_source: str = FACTORS_ABSENT
    # The rows this fit covers (ring.model.regimes): ONE (all of the group's), else THREADED,
    # with the group's inline rows fitted apart in ``inline`` and used for calls of at most
    # ``inline_bytes`` per node.  Then ``held_out`` is the whole group's, each held-out size
    # predicted by its own regime, and the inline fit's own is empty.  Absent from a fit
    # file written before the regimes: one fit at every size, as it was fitted.
    regime: str = ONE
    inline_bytes: int = 0
    inline: Fit | None = None
    # Measured over predicted time per algorithm, N and size of these rows
    # (ring.model.calibration): what ``auto``'s table prices with beside the model (None:
    # a fit file written before them).
    corrections: calibration.Corrections | None = None

    def regimes(self) -> list[Fit]:
        """This fit, then its inline regime's where it has one."""
        return [self] if self.inline is None else [self, self.inline]

    def regime_for(self, nodes: int, nbytes: int, inline_bytes: int | None = None) -> Fit:
        """The fit of the regime a call of ``nbytes`` per node on N nodes runs in, with the
        backend's ``inline_bytes`` (default: the one the rows ran with)."""
        limit = self.inline_bytes if inline_bytes is None else inline_bytes
        if self.inline is not None and runs_inline(nodes, nbytes, limit):
            return self.inline
        return self

    def factors_of(self, algorithm: str, nodes_per_core: float = 0.0) -> Factors:
        """The factors ``algorithm`` is predicted with at ``nodes_per_core`` (its crowded
        ones past one node per core, where the group has them): 1 where the group did not
        measure it."""
        return factors_for(self.factors, algorithm, nodes_per_core)

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
        (default: the machine the fit was measured on), by the model; ``auto``'s table
        multiplies it by :meth:`correction`."""
        return sum(self.predict_terms(algorithm, nodes, nbytes, host, **options).values())

    def predict_terms(
        self, algorithm: str, nodes: int, nbytes: int, host: Host | None = None, **options: int
    ) -> dict[str, float]:
        """:meth:`predict` by the model's terms (:func:`~ring.model.costs.seconds_by_term`):
        how much of the call's time its steps (α), the bytes it moves (β) and reduces (γ)
        and, inline, its buffers take."""
        host = host or Host()
        fit = self.regime_for(nodes, nbytes, host.inline_bytes)
        inline = fit.regime == INLINE
        threads = 1 if inline else nodes  # inline: the calling thread alone
        per_core = fit.nodes_per_core(threads, host.cores) if fit.params.sigma else 0.0
        caches = host.caches or fit.caches
        if algorithm == "ring-segmented" and "segment_bytes" not in options and caches:
            options["segment_bytes"] = default_segment_bytes(max(nodes, 1), caches)
        if algorithm == "hierarchical" and "group_size" not in options and nodes >= 1:
            options["group_size"] = backend_group_size(self.key.get("backend", ""), nodes)
        return seconds_by_term(
            fit.params,
            algorithm,
            nodes,
            nbytes,
            shared=fit.shared,
            nodes_per_core=per_core,
            factors=fit.factors_of(algorithm, fit.nodes_per_core(threads, host.cores)),
            inline=inline,
            **options,
        )

    def correction(
        self, algorithm: str, nodes: int, nbytes: int, host: Host | None = None, **options: int
    ) -> float:
        """The measured correction (ring.model.calibration) of this call's regime, where the
        rows measured this algorithm at this N around this size, on a machine of the same
        cores, with the backend's options; else 1."""
        host = host or Host()
        if options or host.cores not in (None, self.cores):
            return 1.0
        fit = self.regime_for(nodes, nbytes, host.inline_bytes)
        return calibration.factor(fit.corrections, algorithm, nodes, nbytes)

    def to_json(self) -> dict:
        document = asdict(self)
        document["params"] = dict(zip(PARAMETERS, self.params, strict=True))
        if math.isinf(self.params.knee):
            document["params"]["knee"] = None  # JSON has no infinity
        document["held_out"] = [{**asdict(h), "error": h.error} for h in self.held_out]
        document["factors"] = {a: f._asdict() for a, f in self.factors.items()}
        document["inline"] = None if self.inline is None else self.inline.to_json()
        document["corrections"] = calibration.to_json(self.corrections)
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
                    per_node=float(document["params"].get("per_node", 0.0)),
                    ramp=float(document["params"].get("ramp", 1.0)),
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
                factors={
                    str(a): Factors(**{t: float(f[t]) for t in FACTOR_TERMS})
                    for a, f in document.get("factors", {}).items()
                },
                factor_interval={
                    str(a): {t: (float(v[t][0]), float(v[t][1])) for t in FACTOR_TERMS}
                    for a, v in document.get("factor_interval", {}).items()
                },
                factor_source=str(document.get("factor_source", FACTORS_ABSENT)),
                regime=str(document.get("regime", ONE)),
                inline_bytes=int(document.get("inline_bytes", 0)),
                inline=None if not document.get("inline") else cls.from_json(document["inline"]),
                corrections=calibration.from_json(document.get("corrections")),
            )
        except ModelInputError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ModelInputError(f"not a ring.model fit entry ({exc!r})") from None


def _pair(value: object) -> tuple[int, int] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"caches is {value!r}, not [L2, last-level] bytes")
    return int(value[0]), int(value[1])


def _gamma_choice(group: Group, inline: bool = False) -> tuple[float | None, str]:
    rows, measured, _ = design(group.points, group.shared, inline=inline)
    if identifiable(rows[:, :3] if not inline else rows, measured):
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


def held_out(
    points: list[Point], settings: Settings, train: set[int] | None = None
) -> list[HeldOut]:
    """Fit on every other size (1st, 3rd, ...; or the sizes ``train``), predict the others;
    the knee and the held γ chosen again on the training sizes."""
    sizes = sorted({p.nbytes for p in points})
    if train is None or not train & set(sizes):
        train = set(sizes[0::2])
    test = [p for p in points if p.nbytes not in train]
    if not test:
        return []
    training = [p for p in points if p.nbytes in train]
    knee, ramp = choose_knee(training, settings)
    settings = settings._replace(knee=knee, ramp=ramp)
    settings = settings._replace(gamma=held_gamma(training, settings))
    params, factors = fit_with_factors(training, settings)
    return [
        HeldOut(
            p.algorithm,
            p.nodes,
            p.nbytes,
            p.seconds,
            predict_point(params, p, settings.shared, factors, settings.inline),
        )
        for p in sorted(test, key=lambda p: (p.algorithm, p.nodes, p.nbytes))
    ]


def _factor_source(form: str, algorithms: list[str], factors: dict) -> str:
    if not factors:
        return "none: " + (
            "one algorithm measured" if len(algorithms) < 2 else f"form {form!r}, the theory"
        )
    terms = "one factor on the whole time" if form == "time" else "steps and bytes apart"
    return (
        f"fitted per algorithm ({terms}), {reference_algorithm(algorithms)} held at 1; "
        "algorithms not measured in this group: 1 (the theory's coefficients)"
    )


def fit_group(group: Group, seed: int = 0, form: str = FORM, draws: int = BOOTSTRAP_ROUNDS) -> Fit:
    """The fit of one group: parameters, per-algorithm factors (``form``, ring.model.
    efficiency), 95 % bootstrap intervals over ``draws`` refits (0: none, the intervals
    empty; the parameters are the same), held-out errors; the cpu backend's inline and
    threaded rows apart where it has both (ring.model.regimes)."""
    parts = split(group)
    if parts is None:
        return _fit_rows(group, seed, form, draws=draws)
    train = set(sorted({p.nbytes for p in group.points})[0::2])
    threaded, inline = (
        _fit_rows(part, seed, form, train, inline, draws)
        for part, inline in zip(parts, (False, True), strict=True)
    )
    threaded.regime, inline.regime = THREADED, INLINE
    threaded.inline, threaded.inline_bytes = inline, threshold(group)
    threaded.held_out = sorted(
        threaded.held_out + inline.held_out, key=lambda h: (h.algorithm, h.nodes, h.nbytes)
    )
    inline.held_out = []
    threaded.algorithms = sorted({p.algorithm for p in group.points})
    threaded.nodes = sorted({p.nodes for p in group.points})
    threaded.sizes = sorted({p.nbytes for p in group.points})
    return threaded


def _fit_rows(
    group: Group,
    seed: int,
    form: str,
    train: set[int] | None = None,
    inline: bool = False,
    draws: int = BOOTSTRAP_ROUNDS,
) -> Fit:
    """The fit of these rows, as one regime (``inline``: the calls ran on one thread, priced
    by their moves and nodes); held out: the sizes not in ``train``."""
    if not group.points:
        raise ModelInputError(f"no data to fit for {group.key}")
    gamma, gamma_source = _gamma_choice(group, inline)
    sigma, sigma_source = _sigma_choice(group)
    algorithms = sorted({p.algorithm for p in group.points})
    chosen = Settings(group.shared, gamma, math.inf, sigma, form, inline)
    knee, ramp = choose_knee(group.points, chosen)
    held = held_gamma(group.points, chosen._replace(knee=knee, ramp=ramp))
    settings = chosen._replace(knee=knee, ramp=ramp, gamma=held)
    if held is not None and gamma is None:
        gamma_source = (
            "fitted jointly by the theory's coefficients, then held while the per-algorithm "
            "factors were fitted (with these N, β + γ and the factors cannot be told apart)"
        )
    params, factors = fit_with_factors(group.points, settings)
    names = sorted(factors) if factors else algorithms
    interval: dict = {}
    factor_interval: dict = {}
    if draws:
        drawn = bootstrap(group, settings, np.random.default_rng(seed), factors, names, draws)
        interval, factor_interval = intervals(drawn, names)
    return Fit(
        key=dict(group.key),
        shared=group.shared,
        params=params,
        interval=interval,
        gamma_source=gamma_source,
        algorithms=algorithms,
        nodes=sorted({p.nodes for p in group.points}),
        sizes=sorted({p.nbytes for p in group.points}),
        held_out=held_out(group.points, chosen, train),
        sources=list(group.sources),
        sigma_source=sigma_source,
        cores=group.cores,
        caches=group.caches,
        factors=factors,
        factor_interval={a: factor_interval[a] for a in factors if a in factor_interval},
        factor_source=_factor_source(form, algorithms, factors),
        corrections=calibration.measure(
            group.points, lambda p: predict_point(params, p, settings.shared, factors, inline)
        ),
    )
