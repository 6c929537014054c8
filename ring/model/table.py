"""Fit files, and the decision table: the fastest predicted algorithm per size range."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

from ..bench.flags import format_bytes
from ..bench.results import write_text_atomic
from ..mpi.agree import PREFLIGHT_ALGORITHMS
from .costs import ModelInputError, check_point
from .data import rides_preflight
from .fit import Fit, Host

__all__ = [
    "TABLE_NODES",
    "TABLE_SIZES",
    "crossovers",
    "decision_table",
    "fastest",
    "fit_problem",
    "load_fits",
    "save_fits",
    "select",
    "switches",
]

SCHEMA = 1
TABLE_NODES = (2, 4, 8)
TABLE_SIZES = tuple(1 << k for k in range(10, 31))  # 1 KiB .. 1 GiB
# The model picks among the algorithms whose corrected time (ring.model.calibration) is
# within this of the least: the measurements rule out the clearly slower ones, not the
# order of ones the sweep cannot tell apart (at N = 2 the ring, direct, Rabenseifner and
# hierarchical run one plan).
MARGIN = 1.05
# The model prunes, the measurement decides: a planner that measures tries the algorithms
# predicted within this factor of the fastest (a wide net: the model's error on a machine
# it was not fitted on can be this large).
PRUNE = 3.0


def save_fits(path: str | Path, fits: list[Fit], notes: list[str]) -> None:
    document = {
        "schema": SCHEMA,
        "model": "alpha-beta-gamma (Thakur, Rabenseifner & Gropp 2005), ring.model",
        "units": {"alpha": "s", "beta": "s/byte", "gamma": "s/byte reduced"},
        "notes": notes,
        "fits": [fit.to_json() for fit in fits],
    }
    write_text_atomic(Path(path), json.dumps(document, indent=1) + "\n")


def load_fits(path: str | Path) -> list[Fit]:
    """The fits of a fit file, each checked (:func:`fit_problem`): a bad one is refused
    here, in one line naming the file, rather than by whatever later divides or takes the
    least of its predictions (``auto`` on every rank, ``table``, ``predict``)."""
    path = Path(path)
    if not path.is_file():
        raise ModelInputError(f"{path}: no such fit file (make one: python -m ring.model fit)")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelInputError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ModelInputError(f"{path}: not a ring.model fit file of schema {SCHEMA}")
    entries = document.get("fits", [])
    if not isinstance(entries, list):
        raise ModelInputError(f"{path}: 'fits' is not a list")
    fits = []
    for index, entry in enumerate(entries):
        try:
            fit = Fit.from_json(entry)
        except ModelInputError as exc:
            raise ModelInputError(f"{path}: fit {index}: {exc}") from None
        problem = fit_problem(fit)
        if problem:
            raise ModelInputError(f"{path}: fit {index} ({_named(fit)}): {problem}")
        fits.append(fit)
    if not fits:
        raise ModelInputError(f"{path}: holds no fit")
    return fits


def _named(fit: Fit) -> str:
    return ", ".join(f"{k}={v}" for k, v in fit.key.items() if k != "machine")


def fit_problem(fit: Fit) -> str | None:
    """What makes a fit unusable, or None: every coefficient must be a number >= 0, finite
    but for the knee (inf: no knee); each algorithm's factors too; it must name the
    algorithms, N and sizes it was fitted on.  A NaN or a negative coefficient would price
    a call at NaN or below zero, and no algorithm could be chosen."""
    for name, value in fit.params._asdict().items():
        if not value >= 0 or (name != "knee" and math.isinf(value)):
            return f"coefficient {name} is {value}, must be finite and >= 0"
    for algorithm, factors in fit.factors.items():
        for term, value in factors._asdict().items():
            if not 0 <= value < math.inf:
                return f"factor {term} of {algorithm} is {value}, must be finite and >= 0"
    for what in ("algorithms", "nodes", "sizes"):
        if not getattr(fit, what):
            return f"no {what}: not a fit of any measurement"
    if fit.cores < 0 or fit.inline_bytes < 0:
        return "cores and inline_bytes must be >= 0"
    inline = fit.inline
    problem = None if inline is None else fit_problem(inline)
    return None if problem is None else f"inline regime: {problem}"


def select(fits: list[Fit], **wanted: str | None) -> list[Fit]:
    """The fits whose key matches every given (non-None) field, e.g. backend="cpu"."""
    chosen = [f for f in fits if all(v is None or f.key.get(k) == v for k, v in wanted.items())]
    if not chosen:
        asked = ", ".join(f"{k}={v}" for k, v in wanted.items() if v is not None)
        have = "; ".join(" ".join(f.key.values()) for f in fits)
        raise ModelInputError(f"no fit with {asked} (the file has: {have})")
    return chosen


def fastest(
    fit: Fit,
    algorithms: list[str],
    nodes: int,
    nbytes: int,
    host: Host | None = None,
    corrected: bool = True,
) -> str:
    """The algorithm of ``algorithms`` with the least predicted time (first on a tie), N
    nodes on ``host`` (default: the fitted machine), among those whose time corrected by
    what the fit's rows measured is within :data:`MARGIN` of the least
    (ring.model.calibration; ``corrected`` False: the model's pick alone)."""
    if not algorithms:
        raise ModelInputError("no algorithm to choose from")
    backend = fit.key.get("backend", "")
    for name in PREFLIGHT_ALGORITHMS:  # the fewest local operations first
        if name in algorithms and rides_preflight(backend, name, nodes, nbytes):
            return name  # no message beyond the pre-flight every algorithm pays
    model = {a: fit.predict(a, nodes, nbytes, host) for a in algorithms}
    times = {
        a: t * fit.correction(a, nodes, nbytes, host) if corrected else t for a, t in model.items()
    }
    near = [a for a in algorithms if times[a] <= MARGIN * min(times.values())]
    return min(near, key=model.__getitem__)


def ranked(
    fit: Fit, algorithms: list[str], nodes: int, nbytes: int, host: Host | None = None
) -> list[str]:
    """:func:`fastest`'s pick, then the other algorithms whose corrected predicted time is
    within :data:`PRUNE` of the least, the least first: the candidates a planner that
    measures (ring.wisdom) tries, the model's pick first."""
    pick = fastest(fit, algorithms, nodes, nbytes, host)
    times = {
        a: fit.predict(a, nodes, nbytes, host) * fit.correction(a, nodes, nbytes, host)
        for a in algorithms
    }
    least = min(times.values())
    others = sorted((a for a in algorithms if a != pick), key=times.__getitem__)
    return [pick, *(a for a in others if times[a] <= PRUNE * least)]


def decision_table(
    fit: Fit,
    algorithms: list[str] | None = None,
    nodes: tuple[int, ...] = TABLE_NODES,
    sizes: tuple[int, ...] = TABLE_SIZES,
    host: Host | None = None,
) -> list[tuple[int, int, int, str]]:
    """(N, from bytes, to bytes, algorithm) rows: each run of sizes with one fastest pick,
    N nodes on ``host`` (default: the fitted machine), as :func:`fastest` picks.

    ``algorithms`` defaults to the ones the fit measured: the table names no algorithm whose
    cost on this machine is an extrapolation unless asked to (``ALGORITHMS`` for all).
    """
    names = list(fit.algorithms if algorithms is None else algorithms)
    for name in names:
        check_point(name, 1, 0)
    rows: list[tuple[int, int, int, str]] = []
    for n in nodes:
        for size in sizes:
            pick = fastest(fit, names, n, size, host)
            if rows and rows[-1][0] == n and rows[-1][3] == pick:
                rows[-1] = (n, rows[-1][1], size, pick)
            else:
                rows.append((n, size, size, pick))
    return rows


def approx_bytes(size: int) -> str:
    """A size to three digits in binary units (a crossover falls between round sizes)."""
    value, unit = float(size), 0
    while unit < 3 and value >= 1024:
        value, unit = value / 1024, unit + 1
    return f"{value:.3g} {('B', 'KiB', 'MiB', 'GiB')[unit]}"


def table_lines(fit: Fit, rows: list[tuple[int, int, int, str]]) -> list[str]:
    lines = [
        f"{' '.join(fit.key.values())}: fastest predicted allreduce (the model, corrected by "
        "what the fit's rows measured where they measured it)"
    ]
    lines.append(f"{'N':>4}  {'from':>9}  {'to':>9}  algorithm")
    for nodes, low, high, pick in rows:
        lines.append(f"{nodes:>4}  {format_bytes(low):>9}  {format_bytes(high):>9}  {pick}")
    return lines


def _crossing(
    fit: Fit, a: str, b: str, nodes: int, low: int, high: int, host: Host | None = None
) -> int:
    """The least size in (low, high] at which ``a`` and ``b`` swap order (bisection; the
    order at ``low`` differs from the order at ``high``)."""
    first = fit.predict(a, nodes, low, host) < fit.predict(b, nodes, low, host)
    while high - low > 1:
        middle = (low + high) // 2
        if (fit.predict(a, nodes, middle, host) < fit.predict(b, nodes, middle, host)) == first:
            low = middle
        else:
            high = middle
    return high


def crossovers(
    fit: Fit,
    algorithms: list[str] | None = None,
    nodes: int = 2,
    sizes: tuple[int, ...] = TABLE_SIZES,
    host: Host | None = None,
) -> list[tuple[str, str, int]]:
    """(faster below, faster from, size) for every pair of algorithms whose predicted order
    changes between two neighbouring sizes of ``sizes``, the size found to the byte."""
    names = list(fit.algorithms if algorithms is None else algorithms)
    found = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for low, high in itertools.pairwise(sizes):
                below = fit.predict(a, nodes, low, host) < fit.predict(b, nodes, low, host)
                if below != (fit.predict(a, nodes, high, host) < fit.predict(b, nodes, high, host)):
                    size = _crossing(fit, a, b, nodes, low, high, host)
                    found.append((a, b, size) if below else (b, a, size))
    return sorted(found, key=lambda c: c[2])


def switches(rows: list[tuple[int, int, int, str]]) -> list[tuple[int, str, str, int]]:
    """(N, from algorithm, to algorithm, first size) where a decision table changes pick."""
    pairs = itertools.pairwise(rows)
    return [(b[0], a[3], b[3], b[1]) for a, b in pairs if a[0] == b[0]]


def crossover_lines(
    fit: Fit, algorithms: list[str], nodes: tuple[int, ...], host: Host | None = None
) -> list[str]:
    rows = decision_table(fit, algorithms, nodes, host=host)
    lines = ["auto switches (the table's picks change) at:"]
    lines += [
        f"  N={n}: {a} -> {b} from {format_bytes(size)}" for n, a, b, size in switches(rows)
    ] or ["  nowhere: one pick at every size"]
    lines.append("crossovers (predicted times of two algorithms cross) at:")
    for n in nodes:
        pairs = crossovers(fit, algorithms, n, host=host)
        lines.append(f"  N={n}:" + ("" if pairs else " none between 1 KiB and 1 GiB"))
        lines += [f"    {a} < {b} below {approx_bytes(size)}" for a, b, size in pairs]
    return lines
