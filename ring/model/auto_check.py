"""``python -m ring.model check-auto CSV...``: ``auto`` against the fastest fixed algorithm
and executor measured in the same run, per (backend, N, size) (within 1.1x at every size).
A cpu run with ``--executor nodes,slices`` measures each fixed algorithm by both; auto,
which chooses its executor, is judged against the fastest of them.

A run's medians are noisy, and "the fastest fixed algorithm" is the least of several noisy
medians, so a point ratio above 1.1 can be the run's noise rather than a wrong pick.  Where
the harness kept every timed call (``FILE.samples.csv``), each ratio gets a percentile
bootstrap interval: auto's calls and every fixed algorithm's calls are resampled, and the
ratio of auto's median to the least fixed median is recomputed per draw.  A size counts as
beyond 1.1x only when the whole interval is; when it straddles 1.1 the run cannot tell.

``check-picks --fit FIT CSV...`` judges a fit's picks, not ``auto``'s run: at every size, the
fixed series of the algorithm the fit would pick over the fastest fixed series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..bench.flags import format_bytes
from ..bench.results import read_csv, samples_path, schema_problem
from ..schedule import ALGORITHMS, AUTO
from .bootstrap import DRAWS, percentile_bootstrap
from .costs import ModelInputError
from .data import run_meta, unpriced
from .fit import Fit
from .table import fastest

__all__ = [
    "TARGET",
    "AutoPoint",
    "PickPoint",
    "auto_points",
    "check_lines",
    "pick_lines",
    "pick_points",
]

TARGET = 1.1
SEED = 0
NO_INTERVAL = (float("nan"), float("nan"))


@dataclass(frozen=True)
class AutoPoint:
    backend: str
    nodes: int
    nbytes: int
    auto_us: float
    resolved: str
    fastest: str
    fastest_us: float
    # The fixed series of the algorithm auto resolved to, at the same size: auto runs the
    # same code, so auto / this is the run's noise at that size (nan when not measured).
    pick_us: float
    # 95 % bootstrap interval of ``ratio`` (NaN without per-call samples).
    interval: tuple[float, float] = NO_INTERVAL

    @property
    def ratio(self) -> float:
        return self.auto_us / self.fastest_us


def _calls_of(path: Path) -> dict[tuple, dict[str, list[float]]]:
    """Every timed call of the run at ``path``, by (backend, N, size) and algorithm."""
    calls: dict[tuple, dict[str, list[float]]] = {}
    samples = samples_path(path)
    if samples.is_file():
        for row in read_csv(samples)[1]:
            name = _series(row)
            if name is None:
                continue
            key = (row["backend"], int(row["nodes"]), int(row["bytes"]))
            calls.setdefault(key, {}).setdefault(name, []).append(float(row["time_us"]))
    return calls


def ratio_interval(
    auto_calls: Sequence[float], fixed_calls: Sequence[Sequence[float]], rng: np.random.Generator
) -> tuple[float, float]:
    """Bootstrap interval of median(auto) / min over the fixed algorithms of their medians
    (the fixed series resampled first, then auto's)."""

    def ratio(*series: np.ndarray, axis: int) -> np.ndarray:
        fixed = np.min([np.median(s, axis=axis) for s in series[:-1]], axis=0)
        return np.median(series[-1], axis=axis) / fixed

    return percentile_bootstrap([*fixed_calls, auto_calls], ratio, rng, DRAWS)


def _read_run(path: Path, cells: dict, calls: dict, executors: bool = True) -> None:
    """The run's medians (and timed calls) by series into ``cells`` (``calls``);
    ``executors``: with the series of executors the model does not price."""
    if not path.is_file():
        raise ModelInputError(f"{path}: no such file")
    run_meta(path)  # the CSV (and its samples) must be the ones its JSON names
    columns, rows = read_csv(path)
    old = schema_problem(path, columns)
    if old:
        raise ModelInputError(old)
    run_calls = _calls_of(path)
    for row in rows:
        name = _series(row)
        if name is not None and (executors or unpriced(row) is None):
            key = (row["backend"], int(row["nodes"]), int(row["bytes"]))
            seconds = float(row["time_us"])
            cells.setdefault(key, {})[name] = (seconds, row.get("resolved", ""))
            found = run_calls.get(key, {}).get(name)
            if found:
                calls.setdefault(key, {})[name] = found


def _series(row: dict) -> str | None:
    """The series a row belongs to: ``auto``, a fixed algorithm (run as the model prices
    it), or ``algorithm by executor`` (another executor, ``--executor nodes,slices``: auto
    chooses the executor too, so it is judged against every one); None for a peer, or
    for ``auto`` with its executor given or on another kind of buffers."""
    algorithm, other = row["algorithm"], unpriced(row)
    if algorithm not in (AUTO, *ALGORITHMS):
        return None
    if other is None:
        return algorithm
    if algorithm == AUTO or not other.startswith("executor="):
        return None
    return f"{algorithm} by {other.removeprefix('executor=')}"


def auto_points(paths: Sequence[str | Path]) -> list[AutoPoint]:
    """Every size at which a run measured ``auto`` and at least one fixed algorithm, with a
    bootstrap interval where the run kept its timed calls."""
    cells: dict[tuple, dict[str, tuple[float, str]]] = {}
    calls: dict[tuple, dict[str, list[float]]] = {}
    for path in map(Path, paths):
        _read_run(path, cells, calls)
    rng = np.random.default_rng(SEED)
    points = []
    for key, measured in sorted(cells.items()):
        fixed = {a: t for a, (t, _) in measured.items() if a != AUTO}
        if AUTO not in measured or not fixed:
            continue
        fastest = min(fixed, key=fixed.__getitem__)
        auto_us, resolved = measured[AUTO]
        pick_us = fixed.get(resolved, float("nan"))
        sampled = calls.get(key, {})
        interval = NO_INTERVAL
        if all(sampled.get(a) for a in measured):
            interval = ratio_interval(sampled[AUTO], [sampled[a] for a in fixed], rng)
        backend, nodes, nbytes = key
        points.append(
            AutoPoint(
                backend,
                nodes,
                nbytes,
                auto_us,
                resolved,
                fastest,
                fixed[fastest],
                pick_us,
                interval,
            )
        )
    if not points:
        raise ModelInputError("no size with both auto and a fixed algorithm measured")
    return points


def _mark(point: AutoPoint) -> str:
    low, high = point.interval
    if np.isnan(low):
        return "" if point.ratio <= TARGET else f"  > {TARGET}x"
    if low > TARGET:
        return f"  > {TARGET}x"
    return "" if high <= TARGET else "  ?"


def check_lines(points: list[AutoPoint]) -> list[str]:
    lines = [
        f"{'backend':>7} {'N':>3} {'size':>9} {'auto us':>10} {'resolved':>18} "
        f"{'fastest fixed':>26} {'its us':>10} {'ratio':>6} {'95% interval':>13} {'vs pick':>7}"
    ]
    for p in points:
        low, high = p.interval
        interval = "" if np.isnan(low) else f"{low:.2f}-{high:.2f}"
        lines.append(
            f"{p.backend:>7} {p.nodes:>3} {format_bytes(p.nbytes):>9} {p.auto_us:>10.1f} "
            f"{p.resolved:>18} {p.fastest:>26} {p.fastest_us:>10.1f} {p.ratio:>6.2f} "
            f"{interval:>13} {p.auto_us / p.pick_us:>7.2f}{_mark(p)}"
        )
    return lines + _summary(points)


def _summary(points: list[AutoPoint]) -> list[str]:
    within = sum(p.ratio <= TARGET for p in points)
    lines = [
        f"auto within {TARGET}x of the fastest fixed algorithm at {within} of {len(points)} sizes"
    ]
    sampled = [p for p in points if not np.isnan(p.interval[0])]
    if sampled:
        beyond = sum(p.interval[0] > TARGET for p in sampled)
        inside = sum(p.interval[1] <= TARGET for p in sampled)
        lines.append(
            f"with 95% bootstrap intervals over the timed calls ({len(sampled)} sizes): "
            f"within {TARGET}x at {inside}, beyond it at {beyond} (>), "
            f"the run cannot tell at {len(sampled) - inside - beyond} (?)"
        )
    lines.append(
        "vs pick: auto over the same algorithm measured as a fixed series in the same run "
        "(one code path twice: its distance from 1 is the run's noise at that size)"
    )
    return lines


@dataclass(frozen=True)
class PickPoint:
    """What a fit would pick at one measured size, judged by the run's fixed series."""

    backend: str
    nodes: int
    nbytes: int
    pick: str
    pick_us: float
    fastest: str
    fastest_us: float

    @property
    def ratio(self) -> float:
        return self.pick_us / self.fastest_us


def pick_points(fits: Sequence[Fit], paths: Sequence[str | Path]) -> list[PickPoint]:
    """At every (backend, N, size) of these runs, the fixed series of the algorithm the
    backend's fit predicts fastest (among those both measured) against the fastest series:
    the fit's picks judged without the noise of measuring ``auto`` itself."""
    cells: dict[tuple, dict[str, tuple[float, str]]] = {}
    for path in map(Path, paths):
        _read_run(path, cells, {}, executors=False)  # the fit prices nodes alone
    points = []
    for (backend, nodes, nbytes), measured in sorted(cells.items()):
        fixed = {a: t for a, (t, _) in measured.items() if a != AUTO}
        own = [f for f in fits if f.key.get("backend") == backend]
        names = [a for a in own[0].algorithms if a in fixed] if own else []
        if not names:
            continue
        fit = max(own, key=lambda f: (len(f.algorithms), len(f.nodes) * len(f.sizes)))
        pick = fastest(fit, [a for a in fit.algorithms if a in fixed], nodes, nbytes)
        best = min(fixed, key=fixed.__getitem__)
        points.append(PickPoint(backend, nodes, nbytes, pick, fixed[pick], best, fixed[best]))
    if not points:
        raise ModelInputError("no size of these runs has a fixed algorithm the fits measured")
    return points


def pick_lines(points: list[PickPoint]) -> list[str]:
    lines = [
        f"{'backend':>7} {'N':>3} {'size':>9} {'pick':>18} {'its us':>10} "
        f"{'fastest fixed':>18} {'its us':>10} {'ratio':>6}"
    ]
    for p in points:
        lines.append(
            f"{p.backend:>7} {p.nodes:>3} {format_bytes(p.nbytes):>9} {p.pick:>18} "
            f"{p.pick_us:>10.1f} {p.fastest:>18} {p.fastest_us:>10.1f} {p.ratio:>6.2f}"
            + ("" if p.ratio <= TARGET else f"  > {TARGET}x")
        )
    for backend, nodes in sorted({(p.backend, p.nodes) for p in points}):
        mine = [p for p in points if (p.backend, p.nodes) == (backend, nodes)]
        within = sum(p.ratio <= TARGET for p in mine)
        worst = max(p.ratio for p in mine)
        lines.append(
            f"{backend} N={nodes}: the fit's pick within {TARGET}x of the fastest fixed "
            f"algorithm at {within} of {len(mine)} sizes (worst {worst:.2f}x)"
        )
    return lines
