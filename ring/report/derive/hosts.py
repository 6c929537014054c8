"""The numbers of the section across emulated hosts: per link rate, how far the model's
prediction is from the measured time, on the rows the fit saw and on those it did not."""

from __future__ import annotations

from dataclasses import dataclass

from ..load.hosts import HostsModel

__all__ = ["RateCheck", "rate_checks"]


@dataclass(frozen=True)
class RateCheck:
    """One link rate's fit and its predictions' spread (predicted / measured)."""

    level: dict
    fitted: tuple[float, float] | None  # (least, most) over the rows the fit saw
    unseen: tuple[float, float] | None  # over the priced rows it did not
    unseen_rows: int
    oversubscribed_rows: int


def _spread(ratios: list[float]) -> tuple[float, float] | None:
    return (min(ratios), max(ratios)) if ratios else None


def rate_checks(models: list[HostsModel]) -> list[RateCheck]:
    """Per model and rate, in the order the model lists its rates."""
    checks = []
    for model in models:
        for level in model.levels:
            rows = [r for r in model.rows if r["rate"] == level["rate"]]
            priced = [r for r in rows if r["ratio"] is not None]
            seen = [float(r["ratio"]) for r in priced if r["fitted"]]
            unseen = [float(r["ratio"]) for r in priced if not r["fitted"]]
            crowded = sum(bool(r["oversubscribed"]) for r in rows)
            checks.append(RateCheck(level, _spread(seen), _spread(unseen), len(unseen), crowded))
    return checks
