"""What a reader must know before trusting a number: the run's cache size and ceiling drift,
points with more nodes than cores, and points that beat their run's memory ceiling."""

from __future__ import annotations

import pandas as pd

from .ceilings import LLC_MULTIPLE
from .fmt import format_bytes, format_number

__all__ = [
    "ABOVE_CEILING",
    "ceiling_notes",
    "drift",
    "llc_bytes",
    "oversubscribed",
]

# A fraction of the memory ceiling above this, at sizes no cache can hold, is a measurement
# problem (the ceiling or the series measured under other load), not a property of the code.
ABOVE_CEILING = 1.05


def _host_memory(run) -> dict:
    detail = run.ceilings.get("host_memory")
    return detail if isinstance(detail, dict) else {}


def llc_bytes(run) -> int | None:
    """The last-level cache the run's harness read (None for older results)."""
    value = _host_memory(run).get("llc_bytes")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def drift(run) -> float | None:
    """How far the run's host ceilings moved between its start and its end (a fraction)."""
    value = _host_memory(run).get("drift")
    return float(value) if isinstance(value, int | float) else None


def drift_limit(run) -> float:
    return float(_host_memory(run).get("drift_limit") or 0.15)


def oversubscribed(rows: pd.DataFrame) -> pd.DataFrame:
    """(series, nodes, run, threads_per_core) of points with more workers than cores."""
    if "threads_per_core" not in rows:
        return pd.DataFrame(columns=["series", "nodes", "run", "threads_per_core"])
    over = rows[pd.to_numeric(rows["threads_per_core"], errors="coerce") > 1]
    return (
        over[["series", "nodes", "run", "threads_per_core"]]
        .drop_duplicates(["series", "nodes", "run"])
        .reset_index(drop=True)
    )


def ceiling_notes(model) -> list[str]:
    """Caveats about the ceilings: drifted runs, and points above their run's ceiling,
    read as cache effects below 4x the last-level cache and as disturbed measurements
    beyond it."""
    notes = []
    drifts = [(run, drift(run)) for run in model.inputs.runs]
    moved = [
        f"{run.name} ({format_number(100 * value)} %)"
        for run, value in drifts
        if value is not None and value > drift_limit(run)
    ]
    if moved:
        notes.append(
            "**Ceilings drifted.** The host memory ceilings measured at the start and at the "
            f"end of these runs differ by more than 15 %: {', '.join(moved)}. The machine's "
            "conditions changed during them; their ratios to the ceiling (the better of the "
            "two measurements) are less certain than the rest."
        )
    fractions = model.ceiling_fractions
    if fractions.empty:
        return notes
    beyond = fractions[fractions["max_fraction_beyond_llc"].astype(float) > ABOVE_CEILING]
    if not beyond.empty:
        described = "; ".join(
            f"{r.series} N={r.nodes}: {format_number(100 * r.max_fraction_beyond_llc)} % of "
            f"{r.ceiling} at {format_bytes(int(r.beyond_llc_at_bytes))}"
            for r in beyond.itertuples()
        )
        notes.append(
            f"**Above the ceiling beyond the caches.** At sizes of at least {LLC_MULTIPLE}x the "
            f"last-level cache these series ran faster than their run's memory ceiling "
            f"({described}): the series and the ceiling met different load on the machine."
        )
    cached = fractions[
        (fractions["max_fraction"] > ABOVE_CEILING) & ~fractions.index.isin(beyond.index)
    ]
    if not cached.empty:
        described = "; ".join(
            f"{r.series} N={r.nodes}: {format_number(100 * r.max_fraction)} % of {r.ceiling} "
            f"at {format_bytes(r.max_at_bytes)}"
            for r in cached.itertuples()
        )
        notes.append(
            f"**Cache effects.** Below {LLC_MULTIPLE}x the last-level cache some points move "
            f"bytes faster than memory can ({described}): their buffers, or the chunk a ring "
            "step has just written, are still in a cache. The ceilings use arrays of "
            f"{LLC_MULTIPLE}x the cache, so only sizes at least that large compare with them."
        )
    return notes
