"""The model's ``algorithm="auto"``: per call, the algorithm the fitted model predicts fastest.

The library does not run this: it reads decision tables (:mod:`ring.auto`), which
``python -m ring.model decisions`` writes from fits with this module's rule.  Here the
rule is evaluated directly, for the model's tools (``table``, ``check-picks``, the report)
and for writing tables for this machine.

The fit is the user's own when ``RING_MODEL_FIT`` names a fit file (``python -m ring.model
fit``), else the committed default of the closest reference machine (``defaults/<machine>/
model_fit.json``, package data, refitted by the tests from the CSVs beside it).  Within the
fit, the backend's group with the most measured algorithms decides, among the algorithms
it measured (the ones its decision table names): an extrapolated cost never picks.

The choice depends only on the fit, the backend, the collective, N, the bytes per node
and the machine it is for (:func:`local_host`: N over its cores is the nodes per core
that σ prices, its caches size ring-segmented's blocks).  On the cpu backend the bytes per
node also say whether the call runs inline or on the worker threads (ring.model.regimes):
a fit with both regimes prices it by the one it runs in, split at the call's
``inline_bytes`` (by default :data:`ring.cpu.INLINE_BYTES`).  It is cached per (backend,
collective, N, bytes, inline_bytes).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..auto import closeness
from ..machine import host_label
from ..schedule import ALGORITHM_COLLECTIVES
from .costs import ModelInputError
from .fit import Fit, Host
from .table import fastest, load_fits

__all__ = [
    "DEFAULTS",
    "FIT_ENV",
    "candidates",
    "choose",
    "default_fit_files",
    "fit_for",
    "local_cores",
    "local_host",
    "reset",
    "richest",
]

FIT_ENV = "RING_MODEL_FIT"
DEFAULTS = Path(__file__).with_name("defaults")


def default_fit_files() -> list[Path]:
    """The committed fits of the reference machines, one folder per machine."""
    return sorted(DEFAULTS.glob("*/model_fit.json"))


def _local_label() -> str:
    return host_label()


def local_cores() -> int:
    """Cores this machine gives the run (its affinity mask, widened past a launcher's
    binding to one core): N over them is the nodes per core ``auto`` predicts with."""
    from ..bench.placement import machine_cores

    return len(machine_cores())


def local_host(inline_bytes: int | None = None) -> Host:
    """This machine, as the predictions of ``auto`` see it; a CPU fit's regimes split at
    ``inline_bytes`` (default: the cpu backend's, ring.model.regimes)."""
    from ..cpu import INLINE_BYTES
    from ..machine import cache_bytes

    inline = INLINE_BYTES if inline_bytes is None else inline_bytes
    return Host(local_cores(), cache_bytes(), inline)


def richest(fits: list[Fit]) -> Fit:
    """The fit with the most algorithms, then the most points (first on a tie)."""
    return max(fits, key=lambda f: (len(f.algorithms), len(f.nodes) * len(f.sizes)))


@functools.cache
def fit_for(backend: str) -> tuple[Fit, str]:
    """The fit ``auto`` uses on ``backend``, and the file it came from."""
    path = os.environ.get(FIT_ENV)
    if path:
        fits = [f for f in load_fits(path) if f.key.get("backend") == backend]
        if not fits:
            raise ModelInputError(
                f"{FIT_ENV}={path} has no fit for backend {backend!r}: fit a sweep of that "
                f"backend (python -m ring.model fit) or unset {FIT_ENV} for the default"
            )
        return richest(fits), path
    local = _local_label()
    found = [
        (f, str(p))
        for p in default_fit_files()
        for f in load_fits(p)
        if f.key.get("backend") == backend
    ]
    if not found:
        raise ModelInputError(
            f"no committed default fit for backend {backend!r}: set {FIT_ENV} to a fit of "
            "your own sweep (python -m ring.model fit CSV...)"
        )
    best = max(closeness(f.key.get("machine", ""), local) for f, _ in found)
    close = [(f, p) for f, p in found if closeness(f.key.get("machine", ""), local) == best]
    fit = richest([f for f, _ in close])
    return fit, next(p for f, p in close if f is fit)


def candidates(fit: Fit, collective: str) -> list[str]:
    """The algorithms ``auto`` picks from: those the fit measured that have ``collective``."""
    names = [a for a in fit.algorithms if collective in ALGORITHM_COLLECTIVES.get(a, ())]
    if not names:
        raise ModelInputError(
            f"the fit of {' '.join(fit.key.values())} measured no algorithm with {collective}"
        )
    return names


@functools.lru_cache(maxsize=4096)
def choose(
    backend: str, collective: str, nodes: int, nbytes: int, inline_bytes: int | None = None
) -> str:
    """The algorithm ``auto`` runs for this call (cached); ``inline_bytes``: the cpu
    communicator's threshold (None: the default)."""
    fit, _ = fit_for(backend)
    host = local_host(inline_bytes)
    return fastest(fit, candidates(fit, collective), nodes, nbytes, host)


def reset() -> None:
    """Forget the cached fits and choices (after ``RING_MODEL_FIT`` changed)."""
    fit_for.cache_clear()
    choose.cache_clear()
