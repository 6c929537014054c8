"""The findings' numbers: each confirmation launch set, size by size, as ratios between
launches.

A confirmation (``python -m ring.bench launches --finalists``) measured, in L separate
launches, the series a screen picked at each size and the kind's peers.  At each size:

* the **pick** is the screen's fastest series of ours there: chosen in another launch, so
  the confirmation judges it on calls it was not chosen on;
* the **peer** is the fastest peer, by its median over the launches;
* each launch gives one ratio, time(peer) / time(pick), both medians of that launch's calls
  (above 1: ours is faster);
* the ratio is the median of the launches' ratios, and its interval their range: for L
  launches the range holds the median of the launches' distribution with probability
  1 − 2^(1−L) (94 % for 5), whatever that distribution is;
* the **family** is the pick and every other confirmed series of ours that some launch
  found as fast as it or faster (their launches disagree on which is faster): they are one
  finding, named together;
* a launch whose ratio lies further from the others' range than that range is wide (plus
  10 %) is set aside at that size as an outlier, and said to be;
* a size where the pick or the peer ran more workers than cores is set aside whole
  (oversubscribed): its time is the scheduler's.

A **regime** is a run of consecutive sizes with the same verdict (ours faster in every
launch, the peer faster in every launch, or neither) whose families share a series.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...bench.schema import SERIES_KEYS
from ...model.fit import Fit
from ..load import LaunchSet
from .series import is_peer, kind_of, label, oversubscribed, series_of

__all__ = [
    "OUTLIER_MARGIN",
    "Confirmation",
    "Interval",
    "Point",
    "Regime",
    "confirmations",
    "fit_for",
    "predicted_terms",
    "regimes",
    "shares_of",
]

# A launch further from the others' range than that range's own width times this is an
# outlier (in log ratio).
OUTLIER_MARGIN = 1.10


@dataclass(frozen=True)
class Interval:
    """A ratio: the median over launches and the range of the launches kept."""

    point: float
    low: float
    high: float
    launches: int

    def __post_init__(self):
        if not self.low <= self.point <= self.high:
            raise ValueError(f"interval {self.low}–{self.high} misses its point {self.point}")

    @property
    def confidence(self) -> float:
        """The chance that the range of L launches holds their distribution's median."""
        return 1.0 - 2.0 ** (1 - self.launches)

    @property
    def verdict(self) -> str:
        return "ours" if self.low > 1 else "peer" if self.high < 1 else "tie"


@dataclass(frozen=True)
class Point:
    """One size of a confirmation."""

    bytes: int
    pick: dict  # the pick's row of the first launch kept: what ran
    family: list[dict]
    peer: dict
    ratio: Interval | None  # None where the size is set aside whole
    launch_ratios: dict[int, float]  # every launch's, set aside or not
    outliers: dict[int, str]  # launch -> why it is set aside at this size
    pick_us: float  # the median launch's (:attr:`middle`)
    peer_us: float
    middle: int  # the launch whose ratio is the median of those kept (the lower middle one)
    aside: str = ""  # why the whole size is set aside ("" where it is not)
    shares: dict[str, float] | None = None  # the fitted model's split of the pick's time
    predicted_us: float | None = None  # the model's time of the pick (None: no fit)

    @property
    def model_error(self) -> float | None:
        """The model's time over the measured (the median launch's): how far its split
        can be trusted here."""
        return None if self.predicted_us is None else self.predicted_us / self.pick_us

    @property
    def verdict(self) -> str:
        return "aside" if self.ratio is None else self.ratio.verdict


@dataclass
class Confirmation:
    """One launch set of a kind and N, size by size."""

    name: str
    kind: str
    nodes: int
    dtype: str
    op: str
    launches: int
    screen: str
    screened: int  # series of ours the screen measured
    confirmed: int  # series of ours the launches measured
    points: list[Point]
    drift: dict[int, float] = field(default_factory=dict)  # launch -> ceilings' drift
    orders: dict[int, str] = field(default_factory=dict)
    iters: int = 0
    warmup: int = 0
    rounds: int = 1


@dataclass(frozen=True)
class Regime:
    confirmation: Confirmation
    points: list[Point]

    @property
    def verdict(self) -> str:
        return self.points[0].verdict

    @property
    def family(self) -> list[dict]:
        """The series of ours every size of the regime counts in its family (at least the
        picks of the sizes where one series was picked throughout)."""
        keys = [{series_of(r) for r in p.family} for p in self.points]
        common = set.intersection(*keys)
        first = self.points[0].family
        return [r for r in first if series_of(r) in common] or [self.points[0].pick]

    @property
    def peers(self) -> list[str]:
        return list(dict.fromkeys(label(p.peer) for p in self.points))

    @property
    def model_errors(self) -> tuple[float, float] | None:
        """The least and the most the model's time of the picks is of the measured."""
        errors = [e for p in self.points if (e := p.model_error) is not None]
        if len(errors) < len(self.points):
            return None
        return min(errors), max(errors)

    @property
    def shares(self) -> dict[str, float] | None:
        """The model's split averaged over the regime's sizes (None where a size has none)."""
        shares = [s for p in self.points if (s := p.shares) is not None]
        if len(shares) < len(self.points):
            return None
        return {k: float(np.mean([one[k] for one in shares])) for k in shares[0]}


def _launch_times(run_rows: pd.DataFrame, nbytes: int) -> dict[tuple, dict]:
    rows = run_rows[run_rows["bytes"] == nbytes]
    return {series_of(r): r for r in rows.to_dict("records")}


def _outliers(ratios: dict[int, float]) -> dict[int, str]:
    """Launches whose log ratio lies further from the others' range than that range is wide
    (times :data:`OUTLIER_MARGIN`); only with four launches or more."""
    if len(ratios) < 4:
        return {}
    found = {}
    for launch, ratio in ratios.items():
        others = [math.log(r) for k, r in ratios.items() if k != launch]
        low, high = min(others), max(others)
        gap = max(low - math.log(ratio), math.log(ratio) - high)
        if gap > (high - low) + math.log(OUTLIER_MARGIN):
            found[launch] = (
                f"launch {launch}'s ratio {ratio:.3g} lies outside the other launches' "
                f"{math.exp(low):.3g}–{math.exp(high):.3g} by more than their own spread"
            )
    return found


def fit_for(row: Mapping, fits: Sequence[Fit]) -> Fit | None:
    """The fit of the rows a series belongs to: its backend, sync, dtype and op, and the
    same way of running (executor, buffers, ...) as its fit group names."""
    for fit in fits:
        key = fit.key
        named = ("backend", "sync", "dtype", "op")
        if any(str(row.get(k) or "") != key.get(k, "") for k in named):
            continue
        variant = {k: v for k, v in key.items() if k in SERIES_KEYS[3:]}
        own = {k: str(row.get(k) or "") for k in ("executor", "buffers") if row.get(k)}
        priced = {"executor": "nodes", "buffers": "host"}
        own = {k: v for k, v in own.items() if priced.get(k) != v}
        if all(str(row.get(k) or "") == v for k, v in variant.items()) and own.items() <= set(
            variant.items()
        ):
            return fit
    return None


def predicted_terms(row: Mapping, fits: Sequence[Fit]) -> dict[str, float] | None:
    """The fitted model's seconds of a series at its size, by term: its steps (α), the
    bytes it moves (β) and reduces (γ), and inline its buffers (None: no fit for it)."""
    fit = fit_for(row, fits)
    algorithm = str(row["algorithm"])
    if fit is None or algorithm not in fit.algorithms:
        return None
    terms = fit.predict_terms(algorithm, int(row["nodes"]), int(row["bytes"]))
    return terms if sum(terms.values()) > 0 else None


def shares_of(row: Mapping, fits: Sequence[Fit]) -> dict[str, float] | None:
    """The model's split of a series' predicted time at its size, as shares."""
    terms = predicted_terms(row, fits)
    if terms is None:
        return None
    total = sum(terms.values())
    return {k: v / total for k, v in terms.items()}


def _point(launches, environment, pick_key, contenders, nbytes, fits) -> Point | None:
    times = {run.launch: _launch_times(run.rows, nbytes) for run in launches}
    kept = {k: t for k, t in times.items() if pick_key in t}
    if not kept:
        return None
    peers = {key for t in kept.values() for key, row in t.items() if is_peer(row)}
    if not peers:
        return None
    peer_key = min(
        peers, key=lambda p: np.median([t[p]["time_us"] for t in kept.values() if p in t])
    )
    kept = {k: t for k, t in kept.items() if peer_key in t}
    ratios = {k: t[peer_key]["time_us"] / t[pick_key]["time_us"] for k, t in kept.items()}
    outliers = _outliers(ratios)
    good = {k: r for k, r in ratios.items() if k not in outliers}
    first = kept[min(good)]
    pick, peer = first[pick_key], first[peer_key]
    family = [pick]
    for key in contenders:
        mine = [t[pick_key]["time_us"] / t[key]["time_us"] for k, t in kept.items() if key in t]
        if mine and max(mine) >= 1.0:  # some launch found it as fast as the pick, or faster
            family.append(first.get(key) or next(t[key] for t in kept.values() if key in t))
    terms = predicted_terms(pick, fits)
    aside = ""
    if oversubscribed(pick, environment) or oversubscribed(peer, environment):
        aside = "oversubscribed: more workers than cores, so the cores time-slice the nodes"
    values = list(good.values())
    # The launch whose ratio is the median (the lower of the two middle ones where their
    # number is even): the times shown with the ratio are that launch's, so they divide to it.
    middle = sorted(good, key=lambda k: good[k])[(len(good) - 1) // 2]
    interval = None
    if not aside:
        interval = Interval(float(np.median(values)), min(values), max(values), len(values))
    return Point(
        bytes=nbytes,
        pick=pick,
        family=family,
        peer=peer,
        ratio=interval,
        launch_ratios=ratios,
        outliers=outliers,
        pick_us=float(kept[middle][pick_key]["time_us"]),
        peer_us=float(kept[middle][peer_key]["time_us"]),
        middle=middle,
        aside=aside,
        shares=shares_of(pick, fits),
        predicted_us=None if terms is None else 1e6 * sum(terms.values()),
    )


def _drift(run) -> float | None:
    host = (run.ceilings or {}).get("host_memory") or {}
    value = host.get("drift")
    return float(value) if isinstance(value, int | float) else None


def confirmation(
    launch_set: LaunchSet, fits: Sequence[Fit], screened: int = 0
) -> Confirmation | None:
    """A launch set with its finalists, size by size (None: a set that confirmed nothing);
    ``screened``: the series of ours its screen measured."""
    finalists = launch_set.finalists
    if finalists is None:
        return None
    launches = launch_set.launches
    environment = launches[0].environment
    points = []
    for entry in finalists["picks"]:
        pick_key = tuple(entry["pick"].get(k, "") for k in SERIES_KEYS)
        contenders = [tuple(c.get(k, "") for k in SERIES_KEYS) for c in finalists["series"]]
        contenders = [
            c
            for c in contenders
            if c != pick_key and not is_peer(dict(zip(SERIES_KEYS, c, strict=True)))
        ]
        point = _point(launches, environment, pick_key, contenders, int(entry["bytes"]), fits)
        if point is not None:
            points.append(point)
    if not points:
        return None
    first = finalists["picks"][0]
    config = launches[0].meta.get("config") or {}
    ours = {series_of(r) for r in launches[0].rows.to_dict("records") if not is_peer(r)}
    return Confirmation(
        name=launch_set.name,
        kind=kind_of(str(points[0].pick["backend"])),
        nodes=int(first["nodes"]),
        dtype=str(first["dtype"]),
        op=str(first["op"]),
        launches=len(launches),
        screen=str(finalists.get("screen", "")),
        screened=screened,
        confirmed=len(ours),
        points=sorted(points, key=lambda p: p.bytes),
        drift={run.launch: d for run in launches if (d := _drift(run)) is not None},
        orders={
            run.launch: str((run.meta.get("config") or {}).get("order", "")) for run in launches
        },
        iters=int(config.get("iters") or 0),
        warmup=int(config.get("warmup") or 0),
        rounds=int(config.get("rounds") or 1),
    )


def confirmations(
    sets: Sequence[LaunchSet], fits: Sequence[Fit], screened: Mapping[str, int]
) -> list[Confirmation]:
    """Every set that confirmed a screen; ``screened``: series of ours per screen, by the
    screen CSV's SHA-256 (which the finalists record)."""
    found = [
        confirmation(s, fits, screened.get(str((s.finalists or {}).get("screen_sha256")), 0))
        for s in sets
    ]
    return sorted((c for c in found if c is not None), key=lambda c: (c.kind, c.nodes))


def regimes(confirmation: Confirmation) -> list[Regime]:
    """Consecutive sizes with one verdict whose families share a series (set-aside sizes
    form regimes of their own, which no finding states)."""
    found: list[list[Point]] = []
    for point in confirmation.points:
        last = found[-1] if found else None
        if last is not None and last[-1].verdict == point.verdict and _shares_family(last, point):
            last.append(point)
        else:
            found.append([point])
    return [Regime(confirmation, points) for points in found]


def _shares_family(points: list[Point], point: Point) -> bool:
    if point.verdict in ("peer", "aside"):
        return True  # the peer's regime names our fastest by size; its verdict is the peer's
    keys = set.intersection(*({series_of(r) for r in p.family} for p in [*points, point]))
    return bool(keys)
