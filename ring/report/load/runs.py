"""One harness run (``FILE.csv`` + ``FILE.json`` + ``FILE.samples.csv``) and one launch set
of several (``python -m ring.bench launches``), read and checked against the schema
(:mod:`ring.bench.schema`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ...bench.results import samples_path, schema_problem
from ...bench.schema import (
    COLUMNS,
    FLOAT_COLUMNS,
    INTEGER_COLUMNS,
    LAUNCH,
    OPTIONAL_FLOAT_COLUMNS,
    SERIES_KEYS,
    TEXT_COLUMNS,
    VARIANT_COLUMNS,
)
from ...bench.selection import KIND as FINALISTS
from .files import ReportInputError, as_bool, check_pair_of, numeric, read_csv, read_json

__all__ = [
    "KernelBandwidth",
    "LaunchSet",
    "Run",
    "load_kernel_bandwidth",
    "load_launch_set",
    "load_run",
    "load_samples",
]

_JSON_KEYS = ("schema", "command", "environment", "ceilings")
_SAMPLE_KEYS = (*SERIES_KEYS, "nodes", "dtype", "op", "bytes")


@dataclass(frozen=True)
class Run:
    """One harness invocation (or one launch of a set): its rows, the JSON written beside
    them, and its timed calls where it kept them."""

    name: str
    csv_path: Path
    rows: pd.DataFrame
    meta: dict
    samples: pd.DataFrame | None = None
    launch: int = 0  # its launch in a set (1, 2, ...); 0: a run of its own
    machine: str = ""  # a reference folder's name; "" for this build's own results

    @property
    def environment(self) -> dict:
        return self.meta.get("environment") or {}

    @property
    def ceilings(self) -> dict:
        return self.meta.get("ceilings") or {}

    @property
    def commit(self) -> str:
        return str(self.meta.get("git_commit") or "unrecorded")

    @property
    def dirty(self) -> bool | None:
        return self.meta.get("git_dirty")


@dataclass(frozen=True)
class LaunchSet:
    """Several launches of one run, alternated (``FILE.csv`` with a ``launch`` column);
    with the screen's picks where the set confirmed them (``finalists``)."""

    name: str
    csv_path: Path
    meta: dict
    launches: list[Run]
    finalists: dict | None

    @property
    def rows(self) -> pd.DataFrame:
        return pd.concat([run.rows.assign(**{LAUNCH: run.launch}) for run in self.launches])


@dataclass(frozen=True)
class KernelBandwidth:
    """The single-GPU reduction-kernel sweep (not a ring measurement)."""

    name: str
    csv_path: Path
    rows: pd.DataFrame
    meta: dict
    machine: str = ""


def _text(values: pd.Series) -> pd.Series:
    """A column that names a series, as the harness wrote it: "" where empty, a whole number
    without the ".0" that a column with empty cells reads back with."""

    def text(value) -> str:
        if pd.isna(value):
            return ""
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    return values.map(text).astype(str)


def _rows(csv_path: Path, rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of a result CSV, typed and checked."""
    old = schema_problem(csv_path, list(rows.columns))
    if old:
        raise ReportInputError(old)
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise ReportInputError(
            f"{csv_path}: not a ring.bench result, missing columns {missing} "
            f"(found {list(rows.columns)})"
        )
    for column in TEXT_COLUMNS:
        if rows[column].isna().any():
            raise ReportInputError(f"{csv_path}: column {column!r} has empty cells")
        rows[column] = rows[column].astype(str)
    for column in VARIANT_COLUMNS:
        rows[column] = _text(rows[column]) if column in rows else ""
    numeric(csv_path, rows, INTEGER_COLUMNS, integer=True)
    numeric(csv_path, rows, FLOAT_COLUMNS, integer=False)
    numeric(csv_path, rows, OPTIONAL_FLOAT_COLUMNS, integer=False, allow_empty=True)
    rows["shared_devices"] = as_bool(csv_path, "shared_devices", rows["shared_devices"])
    if (rows["nodes"] < 1).any() or (rows["bytes"] < 0).any() or (rows["time_us"] < 0).any():
        raise ReportInputError(f"{csv_path}: negative bytes or time, or nodes < 1")
    key = [c for c in (LAUNCH, *SERIES_KEYS, "nodes", "shared_devices", "dtype", "op", "bytes")]
    key = [c for c in key if c in rows.columns]
    duplicated = rows.duplicated(key)
    if duplicated.any():
        first = rows.loc[duplicated, key].iloc[0].to_dict()
        raise ReportInputError(f"{csv_path}: more than one row for {first}")
    return rows


def load_samples(csv_path: Path) -> pd.DataFrame | None:
    """The timed calls beside a result CSV, None where it kept none."""
    path = samples_path(csv_path)
    if not path.is_file():
        return None
    calls = read_csv(path)
    for column in _SAMPLE_KEYS:
        if column not in calls:
            calls[column] = ""
    for column in VARIANT_COLUMNS:
        calls[column] = _text(calls[column])
    numeric(path, calls, ("nodes", "bytes", "call", *([LAUNCH] if LAUNCH in calls else ())), True)
    numeric(path, calls, ("time_us",), integer=False)
    return calls


def load_run(csv_path: str | Path) -> Run:
    """Read one harness result (``FILE.csv`` + ``FILE.json``) and check the contract."""
    csv_path = Path(csv_path)
    rows = _rows(csv_path, read_csv(csv_path))
    meta = read_json(csv_path.with_suffix(".json"), _JSON_KEYS)
    if meta.get("kind"):
        raise ReportInputError(f"{csv_path}: a {meta['kind']} result, not one run's")
    check_pair_of(csv_path, meta)
    return Run(csv_path.stem, csv_path, rows, meta, load_samples(csv_path))


def load_launch_set(csv_path: str | Path) -> LaunchSet:
    """Read a launch set (``python -m ring.bench launches``): each launch a :class:`Run`
    of its rows, its calls and its own document."""
    csv_path = Path(csv_path)
    meta = read_json(csv_path.with_suffix(".json"), ("schema", "launches"))
    if meta.get("kind") != "launches":
        raise ReportInputError(
            f"{csv_path}: not a launch set (python -m ring.bench launches writes one)"
        )
    check_pair_of(csv_path, meta)
    rows = _rows(csv_path, read_csv(csv_path))
    if LAUNCH not in rows:
        raise ReportInputError(f"{csv_path}: a launch set without its {LAUNCH!r} column")
    numeric(csv_path, rows, (LAUNCH,), integer=True)
    calls = load_samples(csv_path)
    entries = meta["launches"]
    if not isinstance(entries, list) or len(entries) < 2:
        raise ReportInputError(f"{csv_path.with_suffix('.json')}: fewer than 2 launches")
    launches = []
    for entry in entries:
        number = entry.get("launch") if isinstance(entry, dict) else None
        document = entry.get("json") if isinstance(entry, dict) else None
        mine = rows[rows[LAUNCH] == number].drop(columns=LAUNCH)
        if not isinstance(number, int) or not isinstance(document, dict) or mine.empty:
            raise ReportInputError(f"{csv_path}: launch {number} has no rows or no document")
        own = None if calls is None else calls[calls[LAUNCH] == number].drop(columns=LAUNCH)
        name = f"{csv_path.stem}#{number}"
        launches.append(Run(name, csv_path, mine.reset_index(drop=True), document, own, number))
    finalists = meta.get("finalists")
    if finalists is not None and (
        not isinstance(finalists, dict) or finalists.get("kind") != FINALISTS
    ):
        raise ReportInputError(f"{csv_path.with_suffix('.json')}: its finalists are malformed")
    return LaunchSet(csv_path.stem, csv_path, meta, launches, finalists)


KERNEL_COLUMNS = ("bytes", "time_us", "kernel_GBps", "copy_GBps")


def load_kernel_bandwidth(csv_path: str | Path) -> KernelBandwidth:
    """Read the reduction-kernel bandwidth sweep (``python -m ring.bench kernel-bw``)."""
    csv_path = Path(csv_path)
    rows = read_csv(csv_path)
    missing = [c for c in KERNEL_COLUMNS if c not in rows.columns]
    if missing:
        raise ReportInputError(
            f"{csv_path}: not a kernel-bandwidth result, missing columns {missing} "
            f"(found {list(rows.columns)})"
        )
    numeric(csv_path, rows, ["bytes", *(["wrong"] if "wrong" in rows else [])], integer=True)
    numeric(csv_path, rows, ["time_us"], integer=False)
    rates = [c for c in rows.columns if c.endswith("_GBps") or c == "kernel_vs_copy"]
    # The harness leaves a rate empty where the time was too short to give one.
    numeric(csv_path, rows, rates, integer=False, allow_empty=True)
    meta = read_json(csv_path.with_suffix(".json"), ("schema", "environment"))
    check_pair_of(csv_path, meta)
    return KernelBandwidth(csv_path.stem, csv_path, rows, meta)
