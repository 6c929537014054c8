"""Comparisons that needed separate launches (``python -m ring.bench alternate``): the ratio
per size as the median over alternated rounds, with its spread, labelled as such."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..bench.alternate import COLUMNS
from ..bench.results import check_pair, schema_problem
from .fmt import format_bytes, format_ratio
from .inputs import ReportInputError
from .intervals import sides_of_one

__all__ = ["Alternated", "load_alternated", "sentences", "table_rows"]


@dataclass(frozen=True)
class Alternated:
    name: str
    csv_path: Path
    rows: pd.DataFrame
    meta: dict


def load_alternated(csv_path: str | Path) -> Alternated:
    csv_path = Path(csv_path)
    json_path = csv_path.with_suffix(".json")
    if not csv_path.is_file() or not json_path.is_file():
        raise ReportInputError(f"{csv_path}: missing (or its JSON beside it)")
    try:
        rows = pd.read_csv(csv_path)
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise ReportInputError(f"{csv_path}: not a readable alternated comparison ({exc})") from exc
    old = schema_problem(json_path, document=meta)
    if old:
        raise ReportInputError(old)
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing or rows.empty:
        raise ReportInputError(f"{csv_path}: not a ring.bench alternate result (missing {missing})")
    mismatch = check_pair(csv_path, meta) if isinstance(meta, dict) else None
    if mismatch:
        raise ReportInputError(mismatch)
    return Alternated(csv_path.stem, csv_path, rows, meta)


def _reading(r) -> str:
    if r.ratio_min > 1:
        return f"{r.ours} faster in every round"
    if r.ratio_max < 1:
        return f"{r.peer} faster in every round"
    return "rounds disagree"


def table_rows(results: list[Alternated]) -> list[list[str]]:
    rows = []
    for result in results:
        for r in result.rows.itertuples():
            rows.append(
                [
                    r.ours,
                    r.peer,
                    str(r.nodes),
                    format_bytes(int(r.bytes)),
                    format_ratio(r.ratio),
                    f"{format_ratio(r.ratio_min)} – {format_ratio(r.ratio_max)}",
                    str(r.rounds),
                    _reading(r),
                    result.name,
                ]
            )
    return rows


def sentences(results: list[Alternated]) -> list[str]:
    """One finding over every comparison: where every round agrees, and by how much."""
    found = []
    for result in results:
        rows = result.rows
        if rows.empty:
            continue
        first = rows.iloc[0]
        parts = sides_of_one(
            rows,
            ("ratio", "ratio_min", "ratio_max"),
            lambda wins, best, of: (
                f"faster at {len(wins)} of {of} sizes (up to {format_ratio(best.ratio)} at "
                f"{format_bytes(int(best.bytes))}, rounds {format_ratio(best.ratio_min)}–"
                f"{format_ratio(best.ratio_max)})"
            ),
            lambda losses, worst, _: (
                f"slower at {len(losses)} (down to {format_ratio(worst.ratio)} at "
                f"{format_bytes(int(worst.bytes))})"
            ),
            "not consistently faster or slower at any size",
        )
        found.append(f"at N = {first.nodes} {first.ours} is {' and '.join(parts)} ({result.name})")
    if not found:
        return []
    first = results[0].rows.iloc[0]
    return [
        f"Against {first.peer} (separate launches alternated {first.rounds} times, not one "
        f"run): {'; '.join(found)}."
    ]
