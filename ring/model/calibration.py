"""Measured corrections: what a sweep says about an algorithm beyond the α–β–γ model, at the
node counts and sizes it measured.

The model prices every algorithm from one α, β, γ (and σ, a knee, per-algorithm factors
constant over the sizes).  What it cannot follow stays in the residuals, and some of it is
the machine's, not noise: two algorithms that move the same bytes can find different shares
of them in cache (``reduce-broadcast`` copies the whole buffer back after reducing all of
it, ``direct`` half of it right after reducing it, while the cache still holds it), which no
cost linear in the working set tells apart.  Production tuners keep such measurements
beside their model (Open MPI's ``coll_tuned`` decision rules, NCCL's tuner tables).

So a fit keeps, per algorithm and N, measured over predicted time at each size that two
sweeps or more measured (:func:`measure`; the geometric mean over the sweeps): at such a
size the sweeps' own time, between two of them the correction interpolated linearly in log
size, outside them (or at an N, or on a machine of another core count, not measured) none
(:func:`factor`).  One sweep cannot tell the machine's effect from its own disturbance, and
a correction taken from one would let that disturbance pick (:data:`MIN_SWEEPS`).

``auto``'s decision table (ring.model.table.fastest) lets the corrections rule out, not
rank: the model picks among the algorithms whose corrected time is within 5 % of the least,
so algorithms the sweeps cannot tell apart (at N = 2 the ring, direct, Rabenseifner and
hierarchical run one plan) keep the model's order instead of the sweeps' noise.  The model's
own predictions (``predict``, the held-out check, the report's predicted-against-measured
figure, the crossovers) stay the model's.

The measurements behind these choices: docs/notes/model-forms.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from statistics import fmean

from .costs import ModelInputError
from .data import Point

__all__ = ["MIN_SWEEPS", "Corrections", "factor", "from_json", "measure", "to_json"]

# Sweeps that must have measured a point for it to carry a correction: one sweep cannot
# tell the machine's effect from its own disturbance.
MIN_SWEEPS = 2

# algorithm -> N -> ((bytes per node, measured / predicted), ...) in increasing size.
Corrections = Mapping[str, Mapping[int, tuple[tuple[int, float], ...]]]


def measure(
    points: Iterable[Point], predict: Callable[[Point], float], sweeps: int = MIN_SWEEPS
) -> Corrections:
    """Per algorithm and N, measured over ``predict``-ed seconds at each size that at
    least ``sweeps`` sweeps (the points' ``source``) measured: the geometric mean over the
    sweeps of each sweep's geometric mean."""
    logs: dict[tuple[str, int, int], dict[int, list[float]]] = {}
    for p in points:
        predicted = predict(p)
        if p.seconds > 0 and predicted > 0:
            cell = logs.setdefault((p.algorithm, p.nodes, p.nbytes), {})
            cell.setdefault(p.source, []).append(math.log(p.seconds / predicted))
    found: dict[str, dict[int, list[tuple[int, float]]]] = {}
    for (algorithm, nodes, nbytes), by_sweep in sorted(logs.items()):
        if len(by_sweep) >= sweeps:
            ratio = math.exp(fmean(fmean(v) for v in by_sweep.values()))
            found.setdefault(algorithm, {}).setdefault(nodes, []).append((nbytes, ratio))
    return {a: {n: tuple(s) for n, s in by_n.items()} for a, by_n in found.items()}


def factor(corrections: Corrections | None, algorithm: str, nodes: int, nbytes: int) -> float:
    """What the model's time of this call is multiplied by: the measured correction at or
    between the measured sizes (linear in log size), 1 outside them (or with none)."""
    sizes = (corrections or {}).get(algorithm, {}).get(nodes, ())
    if not sizes or nbytes < sizes[0][0] or nbytes > sizes[-1][0]:
        return 1.0
    for (low, below), (high, above) in itertools.pairwise(sizes):
        if low <= nbytes <= high:
            where = math.log(nbytes / low) / math.log(high / low)
            return math.exp((1 - where) * math.log(below) + where * math.log(above))
    return sizes[0][1]  # one measured size, and this is it


def to_json(corrections: Corrections | None) -> dict | None:
    if corrections is None:
        return None
    return {
        a: {str(n): [[size, ratio] for size, ratio in sizes] for n, sizes in by_n.items()}
        for a, by_n in corrections.items()
    }


def from_json(document: object) -> Corrections | None:
    """Corrections from a fit file's ``corrections`` (None: absent, fitted before them)."""
    if document is None:
        return None
    if not isinstance(document, dict):
        raise ModelInputError(f"corrections is {type(document).__name__}, not an object")
    found: dict[str, dict[int, tuple[tuple[int, float], ...]]] = {}
    for algorithm, by_n in document.items():
        found[str(algorithm)] = {}
        for nodes, sizes in by_n.items():
            pairs = tuple((int(size), float(ratio)) for size, ratio in sizes)
            if any(r <= 0 or not math.isfinite(r) for _, r in pairs) or list(pairs) != sorted(
                pairs
            ):
                raise ModelInputError(
                    f"corrections of {algorithm} at N={nodes}: ratios must be finite and "
                    "> 0, sizes increasing"
                )
            found[str(algorithm)][int(nodes)] = pairs
    return found
