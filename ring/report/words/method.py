"""How the findings were measured, in the reader's order of questions: what was compared,
how often, how each number was taken, how winners were chosen, what drifted, and what was
set aside and why.  Every count is read from the launch sets themselves."""

from __future__ import annotations

import numpy as np

from ..derive.confirmed import OUTLIER_MARGIN, Confirmation
from .fmt import format_bytes, format_number

__all__ = ["method"]


def _counts(confirmations: list[Confirmation]) -> str:
    def one(values) -> str:
        values = sorted(set(values))
        return ", ".join(map(str, values))

    return (
        f"{one(c.launches for c in confirmations)} launches, {one(c.iters for c in confirmations)} "
        f"timed calls per series and size in {one(c.rounds for c in confirmations)} rounds, after "
        f"{one(c.warmup for c in confirmations)} warm-up calls"
    )


def _drift(confirmations: list[Confirmation]) -> str:
    values = [d for c in confirmations for d in c.drift.values()]
    if not values:
        return "The launches recorded no ceiling drift."
    return (
        "Each launch measured its memory ceilings at its start and its end; they moved "
        f"{format_number(100 * min(values), 2)}–{format_number(100 * max(values), 2)} % "
        f"(median {format_number(100 * float(np.median(values)), 2)} %) within a launch. "
        "That is recorded, not a reason to discard a launch: the series of a launch are "
        "timed on interleaved calls, so drift falls on them alike, and the interval comes "
        "from the spread between launches, which holds whatever drifted between them."
    )


def _aside(confirmations: list[Confirmation]) -> str:
    outliers = [
        f"{c.kind} N = {c.nodes} at {format_bytes(p.bytes)}: {why}"
        for c in confirmations
        for p in c.points
        for why in p.outliers.values()
    ]
    whole = sorted({f"{c.kind} N = {c.nodes}" for c in confirmations for p in c.points if p.aside})
    text = (
        "A launch is set aside at a size only when its ratio lies further from the other "
        "launches' range than that range is wide (plus "
        f"{format_number(100 * (OUTLIER_MARGIN - 1))} %), with four launches or more: "
        + ("; ".join(outliers) if outliers else "none was")
        + "."
    )
    if whole:
        text += (
            f" Sizes where a series ran more workers than cores ({', '.join(whole)}) are "
            "tabled, not found on: the scheduler, not the code, sets their times."
        )
    return text


def method(confirmations: list[Confirmation]) -> list[str]:
    """The "how this was measured" paragraphs (empty without a confirmation)."""
    if not confirmations:
        return []
    orders = sorted({o for c in confirmations for o in c.orders.values() if o})
    return [
        f"**Launches.** Each comparison of a kind and N ran as {_counts(confirmations)}: "
        "every launch a new process (MPI: a new job), one after the other, each visiting "
        f"the series in the opposite order to the last ({' then '.join(orders)}). Within a "
        "launch, every round visits every series in turn at each size, so no series owns "
        "a quiet or a noisy moment.",
        "**Numbers.** A series' time in a launch is the median of its calls there, each timed "
        "on the host clock (`time.perf_counter`) around the call alone, inputs restored "
        "outside the timed region; under MPI a barrier precedes each call and a call lasts "
        "as long as its slowest rank. A ratio is time(peer) / time(ours) within one launch, "
        "its point the median over launches and its interval their range: for L launches "
        "that range holds the median launch's ratio with probability 1 − 2^(1−L) (94 % for "
        "5), with no assumption about how launches vary. Every timed call is checked "
        "against a float64 reference; #wrong is 0 in every table.",
        "**Winners.** At each size a screen (one launch of every algorithm and way of "
        "running it, beside the peers) picks our fastest series and its near ties; the "
        "confirmation launches measure only those and the peers, so no series is judged on "
        "the calls it was picked on. Where the confirmation finds several of ours as fast "
        "as the pick in some launch, the finding names them together as a family.",
        "**Drift.** " + _drift(confirmations),
        "**Set aside.** " + _aside(confirmations),
    ]
