"""Where a fit's per-byte cost changes with the working set: the knee and its ramp
(:class:`ring.model.costs.Params`), chosen by the BIC over the boundaries between the
measured working sets."""

from __future__ import annotations

import math

import numpy as np

from .costs import working_set
from .data import Point
from .joint import Settings, fit_points, predict_point

__all__ = ["KNEE_MIN_SIZES", "choose_knee"]

KNEE_MIN_SIZES = 3
RESOLUTION = 1e-4


def _bic(points: list[Point], settings: Settings, extra: int) -> float:
    """Bayesian information criterion of the relative residuals (lower is better)."""
    params = fit_points(points, settings)
    errors = [
        predict_point(params, p, settings.shared, inline=settings.inline) / p.seconds - 1
        for p in points
    ]
    # Relative errors under RESOLUTION are rounding, not a better fit.
    rss = max(float(np.sum(np.square(errors))), len(points) * RESOLUTION**2)
    return len(points) * math.log(rss / len(points)) + (3 + extra) * math.log(len(points))


def choose_knee(points: list[Point], settings: Settings) -> tuple[float, float]:
    """(knee, ramp): the working set past which β changes, and the factor past it where β
    reaches β above, knee·ramp (inf, 1: no change; the settings' knee and ramp unused).

    On the reference CPU the per-byte cost doubles once N·n passes the last-level cache
    (32 MiB), which one β cannot follow (it missed by 40-47 % past it); the MPI ring's
    per-byte cost changes there too, the other way.  Calls run inline on the Intel VM
    pass from its 2 MiB L2 to memory over working sets of about 1 to 4 MiB: a step there
    put N = 2, 1 MiB and N = 4, 512 KiB (both 2 MiB) on its far side, 50 % too slow.

    Every boundary between two working sets with at least ``KNEE_MIN_SIZES`` sizes on each
    side is tried as the knee, alone (a step: two more parameters, the knee and the second
    β) and with each later boundary as the end of its ramp (one more); one is kept only if
    it lowers the BIC below the single-β model's.
    """
    sets = sorted({working_set(p.nodes, p.nbytes, settings.shared) for p in points})
    bounds = [
        math.sqrt(sets[i] * sets[i + 1])  # between the two, on the log scale
        for i in range(KNEE_MIN_SIZES - 1, len(sets) - KNEE_MIN_SIZES)
    ]
    best_knee, best_ramp = math.inf, 1.0
    best = _bic(points, settings._replace(knee=math.inf, ramp=1.0), 0)
    for i, knee in enumerate(bounds):
        for end in bounds[i:]:
            ramp = end / knee
            score = _bic(points, settings._replace(knee=knee, ramp=ramp), 2 + (ramp > 1))
            if score < best:
                best, best_knee, best_ramp = score, knee, ramp
    return best_knee, best_ramp
