"""Per-algorithm factors: the data's correction to each algorithm's theoretical cost.

The joint fit (ring.model.joint) prices every algorithm of a group with one α, β, γ, σ and
the coefficients theory gives it (ring.model.costs).  Where an implementation does not get
what its coefficients promise, the joint fit cannot say so, and ``auto`` picks by the
promise: over shared memory the bidirectional ring's two rings in opposite directions buy
nothing, while its coefficients halve its link time, so without factors ``auto`` picks it
where the plain ring is faster.

So each algorithm gets factors on its step terms (κ) and on its per-byte terms (η): its
time is (1 + σ(p - 1))·(κ·a·α + η·(b·β + c·γ)).  The reference algorithm (the ring, else
the first measured) keeps κ = η = 1, which leaves α, β, γ the machine's; the others'
factors and the joint parameters are fitted by alternation (the joint parameters on the
reference's rows, then each algorithm's factors by robust least squares on its own rows
with the joint parameters held), which settles in a few rounds.  An algorithm the group
did not measure has factors 1: its prediction is the theory's.

Forms (:data:`FORMS`): no factors (``theory``), one factor on the whole time (``time``), κ
and η apart (``split``, the one kept, :data:`FORM`): it keeps the held-out error where the
theory had it and picks best.  The factors are per algorithm and the same at every N, so an
N that was not measured needs no rule of its own; factors per (algorithm, N) picked no
better, since small MPI calls jump between neighbouring sizes by more than the algorithms
differ.

Crowded rows apart.  An algorithm's rows at more nodes than cores get factors of their
own, "<algorithm> crowded" (:func:`factor_rows`; the reference's held at 1 there too, so σ
stays its slow-down), used for any N past one node per core; an N at or below it takes
the uncrowded ones.  σ slows every node alike, but an algorithm with one busy node (the
root of reduce-broadcast) leaves its core-mates idle and is slowed less, so one η for both
would misprice it on one side or the other.

The measurements behind these choices: docs/notes/model-forms.md.
"""

from __future__ import annotations

import numpy as np

from .costs import Factors, ModelInputError, Params, oversubscription
from .data import Point
from .joint import (
    CROWDED,
    FORM,
    FORMS,
    THEORY,
    AlgorithmFactors,
    Settings,
    design,
    determines,
    factor_key,
    fit_points,
    predict_point,
    split,
)
from .solve import identifiable, robust_nnls

__all__ = [
    "BOOTSTRAP_ROUNDS",
    "FORM",
    "FORMS",
    "factor_rows",
    "fit_with_factors",
    "held_gamma",
    "reference_algorithm",
]

ROUNDS = 30
# A bootstrap draw starts from the full data's factors and takes one round from there: a
# full alternation per draw made the reference fit take minutes instead of seconds.
BOOTSTRAP_ROUNDS = 1
TOLERANCE = 1e-4


def reference_algorithm(algorithms: list[str]) -> str:
    """The algorithm whose factors stay 1: the ring when measured, else the first."""
    return "ring" if "ring" in algorithms else sorted(algorithms)[0]


def factor_rows(points: list[Point]) -> dict[str, list[Point]]:
    """The rows each set of factors is fitted on, by name (:func:`ring.model.joint.
    factor_key`): per algorithm, and its rows at more nodes than cores apart where the
    reference algorithm was measured there too (its crowded rows give σ, which the others'
    crowded factors are then relative to)."""
    reference = reference_algorithm(sorted({p.algorithm for p in points}))
    crowded = any(p.algorithm == reference and p.nodes_per_core > 1 for p in points)
    rows: dict[str, list[Point]] = {}
    for p in points:
        rows.setdefault(factor_key(p.algorithm, p.nodes_per_core if crowded else 0.0), []).append(p)
    return dict(sorted(rows.items()))


def _held_at_one(algorithms: list[str]) -> set[str]:
    reference = reference_algorithm(algorithms)
    return {reference, reference + CROWDED}


def _parts(
    params: Params, points: list[Point], settings: Settings
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each point's step part, per-byte part and fixed part (the per-node term of an
    inline call, which no factor scales) of its predicted time, at factors 1."""
    fixed, steps, per_byte = (
        np.array(
            [
                predict_point(params, p, settings.shared, {p.algorithm: only}, settings.inline)
                for p in points
            ]
        )
        for only in (Factors(0, 0), Factors(1, 0), Factors(0, 1))
    )
    return steps - fixed, per_byte - fixed, fixed


def held_gamma(points: list[Point], settings: Settings) -> float | None:
    """γ to hold while the factors are fitted: the settings' one, else the theory's fit's
    where β, γ and the factors together are not determined by the rows, else None.

    With every N a power of two, only recursive doubling (and the bidirectional ring on
    own links) has a byte ratio b/c other than 2, and its own η absorbs it: β + γ and η
    trade against each other freely.  Then γ is the joint theory fit's, as before the
    factors (the factors say how far each algorithm is from it); a non-power-of-two N,
    where recursive doubling's ratio changes with N, separates them.
    """
    shared, gamma, knee, _, form, inline, ramp = settings
    algorithms = sorted({p.algorithm for p in points})
    if gamma is not None or form == "theory" or len(algorithms) < 2:
        return gamma
    theory = fit_points(points, settings)
    rows, measured, sets = design(points, shared, inline=inline)
    # σ scales each whole row, as it does the factors' columns below.
    load = np.array([oversubscription(theory.sigma, p.nodes_per_core) for p in points])
    columns = [*(split(rows, sets, knee, ramp) * load[:, None]).T]
    steps, per_byte, _ = _parts(theory, points, settings)
    held = _held_at_one(algorithms)
    for key, own_rows in factor_rows(points).items():
        ids = {id(r) for r in own_rows}
        mine = np.array([id(p) in ids for p in points], dtype=float)
        if key not in held:
            own = [steps + per_byte] if form == "time" else [steps, per_byte]
            columns += [mine * column for column in own]
    jacobian = np.column_stack([c for c in columns if np.any(c != 0)])
    return None if identifiable(jacobian, measured) else theory.gamma


def _own_factors(params: Params, points: list[Point], settings: Settings) -> Factors:
    """One algorithm's (κ, η) on its rows, the joint parameters held."""
    steps, per_byte, fixed = _parts(params, points, settings)
    measured = np.array([p.seconds for p in points]) - fixed
    keep = measured > 0  # rows the per-node term alone explains say nothing of κ and η
    steps, per_byte, measured = steps[keep], per_byte[keep], measured[keep]
    if not keep.any():
        return Factors()
    if settings.form == "time":
        (eta,) = robust_nnls((steps + per_byte)[:, None], measured)
        return Factors(float(eta), float(eta))
    used = [i for i, column in enumerate((steps, per_byte)) if np.any(column > 0)]
    fitted = [1.0, 1.0]  # a term this algorithm does not pay here keeps the theory's factor
    if used:
        solution = robust_nnls(np.column_stack([(steps, per_byte)[i] for i in used]), measured)
        for i, value in zip(used, solution, strict=True):
            fitted[i] = float(value)
    return Factors(*fitted)


def fit_with_factors(
    points: list[Point],
    settings: Settings,
    start: AlgorithmFactors | None = None,
    rounds: int = ROUNDS,
) -> tuple[Params, dict[str, Factors]]:
    """The joint parameters and each measured algorithm's factors, alternated from
    ``start`` (default: the theory's) until neither moves; no factors for ``theory`` or a
    group of one algorithm."""
    form = settings.form
    if form not in FORMS:
        raise ModelInputError(f"unknown factor form {form!r}: choose one of {', '.join(FORMS)}")
    algorithms = sorted({p.algorithm for p in points})
    rows = factor_rows(points)
    factors = {k: Factors() for k in rows} | dict(start or {})
    params = fit_points(points, settings, factors)
    if form == "theory" or len(algorithms) < 2:
        return params, {}
    held = _held_at_one(algorithms)
    # The joint parameters come from the reference algorithm's rows, whose factors are 1 by
    # definition: they alone say what α, β, γ, σ and the per-node term are.  Fitted on
    # every row, the others' factors (free in the next round) could follow α anywhere, and
    # the robust fit would set the reference's rows aside as outliers: α drifting towards 0
    # while the others' step factors grow, the reference priced far below its own time.
    # Every row where the reference's alone do not determine them (with γ fitted, the
    # ring's bytes split β and γ alike at every N): a property of the rows, found once.
    reference = [p for p in points if p.algorithm == reference_algorithm(algorithms)]
    machine = reference if determines(reference, points, settings, THEORY) else points
    for _ in range(rounds):
        updated = {
            k: Factors() if k in held else _own_factors(params, mine, settings)
            for k, mine in rows.items()
        }
        params = fit_points(machine, settings, updated)
        settled = all(
            np.allclose(updated[k], factors.get(k, Factors()), rtol=TOLERANCE, atol=1e-12)
            for k in rows
        )
        factors = updated
        if settled:
            break
    return params, factors
