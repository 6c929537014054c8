"""``python -m ring.model check-auto CSV...``: ``auto`` against the fastest fixed algorithm
measured in the same run, per (backend, N, size) (issue #14: within 1.1x at every size)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..bench.results import read_csv
from ..report.fmt import format_bytes
from ..schedule import ALGORITHMS, AUTO
from .costs import ModelInputError

__all__ = ["TARGET", "AutoPoint", "auto_points", "check_lines"]

TARGET = 1.1


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

    @property
    def ratio(self) -> float:
        return self.auto_us / self.fastest_us


def auto_points(paths: Sequence[str | Path]) -> list[AutoPoint]:
    """Every size at which a run measured ``auto`` and at least one fixed algorithm."""
    cells: dict[tuple, dict[str, tuple[float, str]]] = {}
    for path in map(Path, paths):
        if not path.is_file():
            raise ModelInputError(f"{path}: no such file")
        columns, rows = read_csv(path)
        if "algorithm" not in columns:
            raise ModelInputError(f"{path}: no algorithm column (a run before --algorithm)")
        for row in rows:
            if row["algorithm"] in (AUTO, *ALGORITHMS):
                key = (row["backend"], int(row["nodes"]), int(row["bytes"]))
                seconds = float(row["time_us"])
                cells.setdefault(key, {})[row["algorithm"]] = (seconds, row.get("resolved", ""))
    points = []
    for (backend, nodes, nbytes), measured in sorted(cells.items()):
        fixed = {a: t for a, (t, _) in measured.items() if a != AUTO}
        if AUTO not in measured or not fixed:
            continue
        fastest = min(fixed, key=fixed.__getitem__)
        auto_us, resolved = measured[AUTO]
        pick_us = fixed.get(resolved, float("nan"))
        points.append(
            AutoPoint(backend, nodes, nbytes, auto_us, resolved, fastest, fixed[fastest], pick_us)
        )
    if not points:
        raise ModelInputError("no size with both auto and a fixed algorithm measured")
    return points


def check_lines(points: list[AutoPoint]) -> list[str]:
    lines = [
        f"{'backend':>7} {'N':>3} {'size':>9} {'auto us':>10} {'resolved':>18} "
        f"{'fastest fixed':>18} {'its us':>10} {'ratio':>6} {'vs pick':>7}"
    ]
    for p in points:
        mark = "" if p.ratio <= TARGET else f"  > {TARGET}x"
        lines.append(
            f"{p.backend:>7} {p.nodes:>3} {format_bytes(p.nbytes):>9} {p.auto_us:>10.1f} "
            f"{p.resolved:>18} {p.fastest:>18} {p.fastest_us:>10.1f} {p.ratio:>6.2f} "
            f"{p.auto_us / p.pick_us:>7.2f}{mark}"
        )
    within = sum(p.ratio <= TARGET for p in points)
    lines.append(
        f"auto within {TARGET}x of the fastest fixed algorithm at {within} of {len(points)} sizes"
    )
    lines.append(
        "vs pick: auto over the same algorithm measured as a fixed series in the same run "
        "(one code path twice: its distance from 1 is the run's noise at that size)"
    )
    return lines
