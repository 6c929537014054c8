"""The report's first screen: which of our series to use where, against the fastest peer,
with the confirmation's interval, the number of launches, and why (the fitted model's split
of the time).  Every number is a confirmation launch set's (:mod:`..derive.confirmed`)."""

from __future__ import annotations

from ..derive.confirmed import Confirmation, Interval, Point, Regime
from ..derive.series import family_label, label
from .fmt import format_bytes, format_number, format_ratio

__all__ = ["TERMS", "finding", "findings", "interval_text", "shares_text", "unconfirmed"]

# The model's terms in the study's words.
TERMS = {
    "alpha": "steps (α)",
    "beta": "moving bytes (β)",
    "gamma": "reducing (γ)",
    "per_node": "per-buffer work (inline)",
}


def _span(points: list[Point]) -> str:
    low, high = points[0].bytes, points[-1].bytes
    return format_bytes(low) if low == high else f"{format_bytes(low)}–{format_bytes(high)}"


def interval_text(interval: Interval, invert: bool = False) -> str:
    """``1.07× (launches 1.04–1.11×, 5 launches, a 94 % interval)``; inverted: ours/peer."""
    point, low, high = interval.point, interval.low, interval.high
    if invert:
        point, low, high = 1 / point, 1 / high, 1 / low
    return (
        f"{format_ratio(point)} (range over {interval.launches} launches "
        f"{format_ratio(low)}–{format_ratio(high)}, a "
        f"{format_number(100 * interval.confidence, 2)} % interval)"
    )


# The model's time of a pick within this factor of the measured: its split stands as the why.
TRUSTED = 2.0


def shares_text(shares: dict[str, float] | None, errors: tuple[float, float] | None) -> str:
    if not shares or errors is None:
        return "the model has no fit for this series (its screen's fit left it out)"
    parts = [f"{TERMS[k]} {format_number(100 * v, 2)} %" for k, v in shares.items() if v >= 0.005]
    text = "the fitted α–β–γ model puts its time in " + ", ".join(parts)
    low, high = errors
    if low < 1 / TRUSTED or high > TRUSTED:
        span = format_ratio(low) if low == high else f"{format_ratio(low)}–{format_ratio(high)}"
        text += (
            f", but it predicts {span} the measured time here, so that split is a rough "
            "guide, not a cause"
        )
    return text


def _ratio(point: Point) -> Interval:
    """A point's interval (a finding's sizes are never set aside whole)."""
    if point.ratio is None:
        raise ValueError(f"size {point.bytes} was set aside: {point.aside}")
    return point.ratio


def _ratios(points: list[Point], invert: bool) -> str:
    values = [1 / _ratio(p).point if invert else _ratio(p).point for p in points]
    low, high = min(values), max(values)
    return format_ratio(low) if low == high else f"{format_ratio(low)}–{format_ratio(high)}"


def _where(c: Confirmation, points: list[Point]) -> str:
    return f"{c.kind}, N = {c.nodes}, {_span(points)}"


def _how(c: Confirmation) -> str:
    screened = f"a screen of {c.screened} series of ours" if c.screened else "a screen"
    return (
        f"picked in {screened} (`{_stem(c.screen)}`), confirmed in {c.launches} other "
        f"launches of {c.confirmed} series and the peers (`{c.name}`)"
    )


def _stem(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".csv") if path else "not recorded"


def finding(regime: Regime) -> str | None:
    """One regime as one sentence; None for sizes set aside whole."""
    c, points = regime.confirmation, regime.points
    peers = " or ".join(regime.peers)
    if regime.verdict == "aside":
        return None
    if regime.verdict == "ours":
        weakest = min(points, key=lambda p: _ratio(p).point)
        return (
            f"**{_where(c, points)}: use our `{family_label(regime.family)}`.** It is "
            f"{_ratios(points, False)} faster than {peers} (median over launches; weakest at "
            f"{format_bytes(weakest.bytes)}: {interval_text(_ratio(weakest))}); "
            f"{_how(c)}. Why: over this range, "
            f"{shares_text(regime.shares, regime.model_errors)}."
        )
    if regime.verdict == "peer":
        closest = max(points, key=lambda p: _ratio(p).point)
        ours = " / ".join(dict.fromkeys(label(p.pick) for p in points))
        return (
            f"**{_where(c, points)}: use {peers}, not our ring.** Our fastest there (`{ours}`) "
            f"takes {_ratios(points, True)} as long (closest at {format_bytes(closest.bytes)}: "
            f"{interval_text(_ratio(closest), invert=True)}); {_how(c)}. Why ours is slower: "
            f"{shares_text(regime.shares, regime.model_errors)}."
        )
    ratios = ", ".join(
        f"{format_bytes(p.bytes)} {format_ratio(_ratio(p).low)}–{format_ratio(_ratio(p).high)}"
        for p in points
    )
    return (
        f"**{_where(c, points)}: no clear difference** between our "
        f"`{family_label(regime.family)}` and {peers}: the launches disagree on which is "
        f"faster (time of {peers} over ours, range over {c.launches} launches: {ratios})."
    )


def findings(regimes: list[list[Regime]]) -> list[str]:
    return [text for found in regimes for r in found if (text := finding(r))]


def unconfirmed(
    confirmations: list[Confirmation], screened: dict[tuple[str, int], str]
) -> list[str]:
    """What has no finding and why: each screened kind and N without a confirmation, and
    each confirmed size set aside whole."""
    lines = []
    done = {(c.kind, c.nodes) for c in confirmations}
    for (kind, nodes), why in sorted(screened.items()):
        if (kind, nodes) not in done:
            lines.append(f"{kind}, N = {nodes}: no finding ({why}).")
    for c in confirmations:
        aside = [p for p in c.points if p.verdict == "aside"]
        if aside:
            reasons = "; ".join(dict.fromkeys(p.aside for p in aside))
            lines.append(f"{c.kind}, N = {c.nodes}, {_span(aside)}: no finding ({reasons}).")
    return lines
