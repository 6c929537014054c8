"""Measured corrections: what a sweep says about an algorithm beyond the α–β–γ model, at the
node counts and sizes it measured.

The model prices every algorithm from one α, β, γ (and σ, a knee, per-algorithm factors
constant over the sizes).  What it cannot follow stays in the residuals, and some of it is
the machine's, not noise: on intel-xeon-2core, calls run inline at N = 2 and 1-2 MiB per
node, ``reduce-broadcast`` is 1.13-1.18x slower than ``direct`` in both fitting sweeps and
in both auto checks (it copies the whole buffer back after reducing all of it, ``direct``
half of it right after reducing it, while the cache still holds it), which no cost linear
in the working set tells apart; the model picked it there.  Production tuners keep such
measurements beside their model (Open MPI's ``coll_tuned`` decision rules, NCCL's tuner
tables).

So a fit keeps, per algorithm and N it measured, the geometric mean of measured over
predicted time at each measured size (:func:`measure`): at a measured size the sweep's own
time, between two measured sizes the correction interpolated linearly in log size, outside
them (or at an N, or on a machine of another core count, the sweep did not measure) none
(:func:`factor`).  ``auto``'s decision table (ring.model.table.fastest) lets them rule out,
not rank: the model picks among the algorithms whose corrected time is within 5 % of the
least, so algorithms the sweep cannot tell apart (at N = 2 the ring, direct, Rabenseifner
and hierarchical run one plan) keep the model's order instead of the sweep's noise.  The
model's own predictions (``predict``, the held-out check, the report's predicted-against-
measured figure, the crossovers) stay the model's.

Judged on two auto checks of results/reference/intel-xeon-2core/auto_check, fixed series
of runs never fitted on (``python -m ring.model check-picks``), the picks within 1.1x of
the fastest fixed algorithm went from 63 to 65 of 68 sizes (the run of 2026-12-01, 21:08
UTC) and from 63 to 67 (2026-12-02, 06:30 UTC).  Fitted on every other size only and judged
at the sizes between (corrections interpolated across a factor of 4), 29 of 32 on both runs
against the model's 28: the one pick it mends is cpu N = 2 at 2 MiB.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping

from .costs import ModelInputError
from .data import Point

__all__ = ["Corrections", "factor", "from_json", "measure", "to_json"]

# algorithm -> N -> ((bytes per node, measured / predicted), ...) in increasing size.
Corrections = Mapping[str, Mapping[int, tuple[tuple[int, float], ...]]]


def measure(points: Iterable[Point], predict: Callable[[Point], float]) -> Corrections:
    """Per algorithm and N, the geometric mean of measured over ``predict``-ed seconds at
    each size the points measured."""
    logs: dict[tuple[str, int, int], list[float]] = {}
    for p in points:
        predicted = predict(p)
        if p.seconds > 0 and predicted > 0:
            logs.setdefault((p.algorithm, p.nodes, p.nbytes), []).append(
                math.log(p.seconds / predicted)
            )
    found: dict[str, dict[int, list[tuple[int, float]]]] = {}
    for (algorithm, nodes, nbytes), values in sorted(logs.items()):
        ratio = math.exp(sum(values) / len(values))
        found.setdefault(algorithm, {}).setdefault(nodes, []).append((nbytes, ratio))
    return {a: {n: tuple(s) for n, s in by_n.items()} for a, by_n in found.items()}


def factor(corrections: Corrections, algorithm: str, nodes: int, nbytes: int) -> float:
    """What the model's time of this call is multiplied by: the measured correction at or
    between the measured sizes (linear in log size), 1 outside them."""
    sizes = corrections.get(algorithm, {}).get(nodes, ())
    if not sizes or nbytes < sizes[0][0] or nbytes > sizes[-1][0]:
        return 1.0
    for (low, below), (high, above) in itertools.pairwise(sizes):
        if low <= nbytes <= high:
            where = math.log(nbytes / low) / math.log(high / low)
            return math.exp((1 - where) * math.log(below) + where * math.log(above))
    return sizes[0][1]  # one measured size, and this is it


def to_json(corrections: Corrections) -> dict:
    return {
        a: {str(n): [[size, ratio] for size, ratio in sizes] for n, sizes in by_n.items()}
        for a, by_n in corrections.items()
    }


def from_json(document: object) -> Corrections:
    """Corrections from a fit file's ``corrections`` (absent: none, as fitted before them)."""
    if document is None:
        return {}
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
