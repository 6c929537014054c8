"""Reading one result file with errors that name it: the JSON beside a CSV, a CSV of at
least one row, numeric and true/false columns checked cell by cell."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ...bench.results import check_pair, schema_problem

__all__ = ["ReportInputError", "as_bool", "check_pair_of", "numeric", "read_csv", "read_json"]


class ReportInputError(ValueError):
    """A result file the report needs is missing or malformed; the message names the file."""


def read_json(path: Path, required_keys: tuple[str, ...]) -> dict:
    if not path.is_file():
        raise ReportInputError(
            f"{path}: missing; the harness writes this JSON beside its CSV "
            "(environment and ceilings of the run)"
        )
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportInputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise ReportInputError(f"{path}: expected a JSON object, found {type(meta).__name__}")
    missing = [key for key in required_keys if key not in meta]
    if missing:
        raise ReportInputError(f"{path}: missing keys {missing}")
    old = schema_problem(path, document=meta)
    if old:
        raise ReportInputError(old)
    for key in ("environment", "ceilings"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise ReportInputError(f"{path}: {key!r} must be an object")
    return meta


def read_csv(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise ReportInputError(f"{path}: missing")
    try:
        frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ReportInputError(f"{path}: not a readable CSV ({exc})") from exc
    except pd.errors.EmptyDataError as exc:
        raise ReportInputError(f"{path}: empty file") from exc
    if frame.empty:
        raise ReportInputError(f"{path}: has a header but no rows")
    return frame


def as_bool(path: Path, column: str, values: pd.Series) -> pd.Series:
    """true/false; an empty cell (a column that does not apply to the row) reads false."""
    mapping = {"true": True, "false": False, "1": True, "0": False, "": False}
    text = values.map(lambda v: "" if pd.isna(v) else str(v)).str.strip().str.lower()
    bad = sorted(set(text[~text.isin(mapping)]))
    if bad:
        raise ReportInputError(f"{path}: column {column!r} holds {bad}, expected true/false")
    return text.map(mapping).astype(bool)


def numeric(
    path: Path, frame: pd.DataFrame, columns, integer: bool, allow_empty: bool = False
) -> None:
    for column in columns:
        if column not in frame:
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        invalid = values.isna() & frame[column].notna() if allow_empty else values.isna()
        bad = frame.index[invalid].tolist()
        if bad:
            raise ReportInputError(
                f"{path}: column {column!r} is not numeric in data row(s) "
                f"{[i + 1 for i in bad[:5]]}"
            )
        if integer:
            if not (values == values.round()).all():
                raise ReportInputError(f"{path}: column {column!r} must hold integers")
            values = values.astype("int64")
        elif not values.dropna().map(math.isfinite).all():
            raise ReportInputError(f"{path}: column {column!r} holds inf")
        frame[column] = values


def check_pair_of(csv_path: Path, meta: dict) -> None:
    """A CSV (or samples) of one run with another's JSON would borrow its environment."""
    mismatch = check_pair(csv_path, meta)
    if mismatch:
        raise ReportInputError(mismatch)
