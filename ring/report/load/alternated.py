"""Comparisons that needed separate launches (``python -m ring.bench alternate``): per size,
the ratio as the median over alternated rounds, with its range."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...bench.alternate import COLUMNS
from ...bench.results import schema_problem
from .files import ReportInputError, check_pair_of

__all__ = ["Alternated", "load_alternated"]


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
    if isinstance(meta, dict):
        check_pair_of(csv_path, meta)
    return Alternated(csv_path.stem, csv_path, rows, meta)
