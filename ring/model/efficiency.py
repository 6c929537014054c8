"""Per-algorithm factors: the data's correction to each algorithm's theoretical cost.

The joint fit (ring.model.joint) prices every algorithm of a group with one α, β, γ, σ and
the coefficients theory gives it (ring.model.costs).  Where an implementation does not get
what its coefficients promise, the joint fit cannot say so, and ``auto`` picks by the
promise: on the reference machine (amd-epyc-2core) the bidirectional ring's two rings in
opposite directions buy nothing over shared memory, while its coefficients halve its link
time, so ``auto`` picked it where the plain ring is 1.15-1.4x faster.

So each algorithm gets factors on its step terms (κ) and on its per-byte terms (η): its
time is (1 + σ(p - 1))·(κ·a·α + η·(b·β + c·γ)).  The reference algorithm (the ring, else
the first measured) keeps κ = η = 1, which leaves α, β, γ the machine's as before; the
others' factors and the joint parameters are fitted by alternation (the joint fit with the
factors held, then each algorithm's factors by robust least squares on its own rows with
the joint parameters held), which settles in a few rounds.  An algorithm the group did
not measure has factors 1: its prediction is the theory's.

Forms compared on the reference sweeps of 06:17 UTC, 2026-12-01 (measured without
``--rounds``), with picks judged on a later run that measured all 7 algorithms at every size
with ``--rounds 10`` and was never fitted on (``python -m ring.model check-picks``):

    form                    held-out within 25 % (>= 4 KiB)   picks within 1.1x (worst)
                            cpu N=2,4    mpi N=2,4            cpu N=2   cpu N=4   mpi N=2   mpi N=4
    theory (no factors)     29, 29 /49   25, 32 /49           8 (1.46)  9 (1.72)  7 (1.74)  5 (1.47)
    one factor on the time  26, 29       24, 33               11 (1.49) 14 (1.72) 10 (1.46) 6 (1.47)
    κ on steps, η on bytes  25, 33       27, 32               11 (1.49) 12 (1.72) 10 (1.30) 8 (1.47)

(of 17 sizes each for the picks.)  Both forms of factors lift the picks within 1.1x from 29
to 41 of 68 sizes; steps and bytes apart keep the held-out error where the theory had it
(117 of 196 within 25 %, against 115; one factor on the whole time: 112) and take the worst
mpi N=2 pick from 1.74x to 1.30x, so that is the form kept (:data:`FORM`).  A factor per
algorithm is the same at N = 2 and N = 4; factors per (algorithm, N), tried by patching
this module (not kept: an N that was not measured would need its own rule), gave 27, 36 and
28, 39 held-out, and picks 13 (1.54), 11 (1.21), 11 (1.47), 11 (1.31): 46 of 68.  Those
sweeps did not show recursive doubling ahead at mpi N = 4 (it and direct alternated as the
fastest from 2 KiB to 256 KiB), so no fit of them picked it there: sweeps measured without
rounds carry drift between series that a fit cannot tell from the algorithms.  The
committed default is fitted from sweeps measured with ``--rounds 5`` (its JSON sidecars
say so); results/reference/amd-epyc-2core/auto_check/README.md gives what it picks.

Per (algorithm, N) tried again on that default, its cpu regimes fitted apart
(ring.model.regimes), picks judged on that README's run (of 68 sizes within 1.1x; cpu N=2,
N=4, mpi N=2, N=4) beside the held-out points within 25 % (of 49 each, same order):

    factors                                 picks                held-out
    κ, η per algorithm (kept)               56: 14, 15, 14, 13   29, 31, 35, 33
    κ, η per (algorithm, N)                 50: 12, 12, 14, 12   31, 26, 36, 38
    κ per (algorithm, N), η per algorithm   52: 12, 13, 14, 13   30, 27, 37, 36
    η per (algorithm, N), κ per algorithm   51: 12, 15, 14, 10   28, 29, 36, 35

Per N, the fit picks recursive doubling at mpi N = 4 from 2 KiB to 16 KiB, where these
sweeps have it ahead, but also at 1 KiB, where direct is 1.19x faster, and it moves the
picks of other sizes as far the other way (mpi N = 4 worst 1.19x instead of 1.35x, but at
as many sizes).  Below 64 KiB the MPI times jump between neighbouring sizes by more than
the algorithms differ (recursive doubling 1.3x ahead of direct at 2 KiB, behind at 4 and 8
KiB, ahead at 16 and 32 KiB, in the sweep and the check alike), which no cost smooth in the
size follows, with one factor or two.  So the factors stay per algorithm, the same at every
N, and an N that was not measured needs no rule of its own.
"""

from __future__ import annotations

import numpy as np

from .costs import Factors, ModelInputError, Params, oversubscription
from .data import Point
from .joint import FORM, FORMS, AlgorithmFactors, Settings, design, fit_points, predict_point, split
from .solve import identifiable, robust_nnls

__all__ = [
    "BOOTSTRAP_ROUNDS",
    "FORM",
    "FORMS",
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
    shared, gamma, knee, _, form, inline = settings
    algorithms = sorted({p.algorithm for p in points})
    if gamma is not None or form == "theory" or len(algorithms) < 2:
        return gamma
    theory = fit_points(points, settings)
    rows, measured, sets = design(points, shared, inline=inline)
    # σ scales each whole row, as it does the factors' columns below.
    load = np.array([oversubscription(theory.sigma, p.nodes_per_core) for p in points])
    columns = [*(split(rows, sets, knee) * load[:, None]).T]
    steps, per_byte, _ = _parts(theory, points, settings)
    reference = reference_algorithm(algorithms)
    for algorithm in algorithms:
        mine = np.array([p.algorithm == algorithm for p in points], dtype=float)
        if algorithm != reference:
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
    factors = {a: Factors() for a in algorithms} | dict(start or {})
    params = fit_points(points, settings, factors)
    if form == "theory" or len(algorithms) < 2:
        return params, {}
    reference = reference_algorithm(algorithms)
    rows = {a: [p for p in points if p.algorithm == a] for a in algorithms}
    for _ in range(rounds):
        updated = {
            a: Factors() if a == reference else _own_factors(params, rows[a], settings)
            for a in algorithms
        }
        params = fit_points(points, settings, updated)
        settled = all(
            np.allclose(updated[a], factors.get(a, Factors()), rtol=TOLERANCE, atol=1e-12)
            for a in algorithms
        )
        factors = updated
        if settled:
            break
    return params, factors
