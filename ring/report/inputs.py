"""Reading the result files a report is built from, with errors that name the file.

Inputs the caller names are required: each must exist and parse, or the build stops before
anything is written.  Results the caller does not name are "not measured" and the report
says so; they are never filled in.

* sweep: ``FILE.csv`` from ``python -m ring.bench`` and its ``FILE.json`` beside it;
* kernel bandwidth: the single-GPU reduction-kernel sweep (CSV + JSON, same convention);
* profile: ``results/profiles/<name>/`` holding ``tables/*.csv`` from ``python -m ring.nsys``;
* reference: a folder of results measured on another machine and committed
  (``results/reference/<machine>/``: sweeps and kernel sweeps at its top, profiles under
  ``profiles/<name>/``).  Everything read from it carries the folder's name as its
  ``machine``, so the report can say where each series came from; what this run measured
  has ``machine == ""``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ..bench.backends import VARIANT_COLUMNS
from ..bench.results import COLUMNS, check_pair, schema_problem
from ..study import RECORD_KEYS, LeftOut

__all__ = [
    "SWEEP_COLUMNS",
    "Inputs",
    "KernelBandwidth",
    "LeftOut",
    "Profile",
    "ReportInputError",
    "Run",
    "discover_reference",
    "load_inputs",
    "load_kernel_bandwidth",
    "load_not_measured",
    "load_profile",
    "load_sweep",
]

# The bench CSV contract; the harness may write more columns, never fewer.
SWEEP_COLUMNS = COLUMNS
_INTEGER_COLUMNS = ("nodes", "bytes", "count", "iters", "wrong")
_FLOAT_COLUMNS = (
    "time_us",
    "time_us_min",
    "time_us_p25",
    "time_us_p75",
    "time_us_max",
    "algbw_GBps",
    "busbw_GBps",
)
# Empty where the harness cannot know it (NCCL's traffic is hidden inside its kernels).
_OPTIONAL_FLOAT_COLUMNS = ("traffic_GBps",)
_TEXT_COLUMNS = ("backend", "sync", "algorithm", "dtype", "op")
_JSON_KEYS = ("schema", "command", "environment", "ceilings")


class ReportInputError(ValueError):
    """A result file the report needs is missing or malformed; the message names the file."""


@dataclass(frozen=True)
class Run:
    """One harness invocation: its CSV rows and the JSON written beside them."""

    name: str
    csv_path: Path
    json_path: Path
    rows: pd.DataFrame
    meta: dict
    machine: str = ""  # a reference folder's name; "" for this run's own results

    @property
    def environment(self) -> dict:
        return self.meta.get("environment") or {}

    @property
    def ceilings(self) -> dict:
        return self.meta.get("ceilings") or {}


@dataclass(frozen=True)
class KernelBandwidth:
    """The single-GPU reduction-kernel sweep (not a ring measurement)."""

    name: str
    csv_path: Path
    json_path: Path
    rows: pd.DataFrame
    meta: dict
    machine: str = ""


@dataclass(frozen=True)
class Profile:
    """Tidy tables of one ``nsys`` profile; a table is absent when its report had no data."""

    name: str
    path: Path
    tables: dict[str, pd.DataFrame]
    summary: str | None
    machine: str = ""


@dataclass
class Inputs:
    runs: list[Run]
    kernel_bandwidth: list[KernelBandwidth] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)
    left_out: list[LeftOut] | None = None  # None: the workflow's record was not given

    def sweep_rows(self) -> pd.DataFrame:
        """All sweep rows, each tagged with the run (file stem) it came from."""
        frames = [
            run.rows.assign(run=run.name, machine=run.machine, mpi_hosts=_mpi_hosts(run))
            for run in self.runs
        ]
        return pd.concat(frames, ignore_index=True)

    def local_runs(self) -> list[Run]:
        """The runs this report's own machine measured (all runs when every one is a
        reference): what "not measured" is about."""
        return [run for run in self.runs if not run.machine] or self.runs


def _mpi_hosts(run: Run) -> float:
    """Machines the run's MPI ranks ran on, NaN where its JSON does not say (older runs)."""
    hosts = run.environment.get("mpi_hosts")
    return float(hosts) if isinstance(hosts, int) and not isinstance(hosts, bool) else math.nan


def _read_json(path: Path, required_keys: tuple[str, ...]) -> dict:
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


def _read_csv(path: Path) -> pd.DataFrame:
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


def _as_bool(path: Path, column: str, values: pd.Series) -> pd.Series:
    """true/false; an empty cell (a column that does not apply to the row) reads false."""
    mapping = {"true": True, "false": False, "1": True, "0": False, "": False}
    text = values.map(lambda v: "" if pd.isna(v) else str(v)).str.strip().str.lower()
    bad = sorted(set(text[~text.isin(mapping)]))
    if bad:
        raise ReportInputError(f"{path}: column {column!r} holds {bad}, expected true/false")
    return text.map(mapping).astype(bool)


def _numeric(
    path: Path, frame: pd.DataFrame, columns, integer: bool, allow_empty: bool = False
) -> None:
    for column in columns:
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


def load_sweep(csv_path: str | Path) -> Run:
    """Read one harness result (``FILE.csv`` + ``FILE.json``) and check the contract."""
    csv_path = Path(csv_path)
    json_path = csv_path.with_suffix(".json")
    rows = _read_csv(csv_path)
    old = schema_problem(csv_path, list(rows.columns))
    if old:
        raise ReportInputError(old)
    missing = [c for c in SWEEP_COLUMNS if c not in rows.columns]
    if missing:
        raise ReportInputError(
            f"{csv_path}: not a ring.bench result, missing columns {missing} "
            f"(found {list(rows.columns)})"
        )
    for column in _TEXT_COLUMNS:
        if rows[column].isna().any():
            raise ReportInputError(f"{csv_path}: column {column!r} has empty cells")
        rows[column] = rows[column].astype(str)
    _numeric(csv_path, rows, _INTEGER_COLUMNS, integer=True)
    _numeric(csv_path, rows, _FLOAT_COLUMNS, integer=False)
    _numeric(csv_path, rows, _OPTIONAL_FLOAT_COLUMNS, integer=False, allow_empty=True)
    rows["shared_devices"] = _as_bool(csv_path, "shared_devices", rows["shared_devices"])
    if (rows["nodes"] < 1).any() or (rows["bytes"] < 0).any() or (rows["time_us"] < 0).any():
        raise ReportInputError(f"{csv_path}: negative bytes or time, or nodes < 1")
    key = ["backend", "sync", "nodes", "shared_devices", "dtype", "op", "bytes"]
    key += [c for c in ("algorithm", *VARIANT_COLUMNS) if c in rows.columns]
    duplicated = rows.duplicated(key)
    if duplicated.any():
        first = rows.loc[duplicated, key].iloc[0].to_dict()
        raise ReportInputError(f"{csv_path}: more than one row for {first}")
    meta = _read_json(json_path, _JSON_KEYS)
    _check_pair(csv_path, meta)
    return Run(csv_path.stem, csv_path, json_path, rows, meta)


def _check_pair(csv_path: Path, meta: dict) -> None:
    """A CSV (or samples) of one run with another's JSON would borrow its environment."""
    mismatch = check_pair(csv_path, meta)
    if mismatch:
        raise ReportInputError(mismatch)


KERNEL_COLUMNS = ("bytes", "time_us", "kernel_GBps", "copy_GBps")


def load_kernel_bandwidth(csv_path: str | Path) -> KernelBandwidth:
    """Read the reduction-kernel bandwidth sweep (``python -m ring.bench kernel-bw``)."""
    csv_path = Path(csv_path)
    rows = _read_csv(csv_path)
    missing = [c for c in KERNEL_COLUMNS if c not in rows.columns]
    if missing:
        raise ReportInputError(
            f"{csv_path}: not a kernel-bandwidth result, missing columns {missing} "
            f"(found {list(rows.columns)})"
        )
    _numeric(csv_path, rows, ["bytes", *(["wrong"] if "wrong" in rows else [])], integer=True)
    _numeric(csv_path, rows, ["time_us"], integer=False)
    for column in [c for c in rows.columns if c.endswith("_GBps") or c == "kernel_vs_copy"]:
        # The harness leaves a rate empty where the time was too short to give one.
        values = pd.to_numeric(rows[column], errors="coerce")
        if (values.isna() & rows[column].notna()).any():
            raise ReportInputError(f"{csv_path}: column {column!r} is not numeric")
        rows[column] = values
    meta = _read_json(csv_path.with_suffix(".json"), ("schema", "environment"))
    _check_pair(csv_path, meta)
    return KernelBandwidth(csv_path.stem, csv_path, csv_path.with_suffix(".json"), rows, meta)


def load_profile(path: str | Path) -> Profile:
    """Read ``<profile>/tables/*.csv`` (and ``summary.md`` when present)."""
    path = Path(path)
    tables_dir = path / "tables"
    if not tables_dir.is_dir():
        raise ReportInputError(
            f"{tables_dir}: missing; `python -m ring.nsys tables --out {tables_dir} ...` "
            "writes the profile tables there"
        )
    from ..nsys.tables import COLUMNS, NsysCsvError, read_tables

    try:
        # Checks every table's columns against the ones ring.nsys writes.
        read_tables(tables_dir)
    except (NsysCsvError, ValueError) as exc:
        raise ReportInputError(str(exc)) from exc
    tables = {
        name: _read_csv(tables_dir / f"{name}.csv")
        for name in COLUMNS
        if (tables_dir / f"{name}.csv").is_file()
    }
    if not tables:
        raise ReportInputError(f"{tables_dir}: holds none of {[f'{n}.csv' for n in COLUMNS]}")
    summary_path = path / "summary.md"
    summary = summary_path.read_text(encoding="utf-8") if summary_path.is_file() else None
    return Profile(path.name, path, tables, summary)


def load_not_measured(path: str | Path) -> list[LeftOut]:
    """Read the workflow's record of what this machine could not measure
    (:class:`ring.study.LeftOut`, field by field)."""
    path = Path(path)
    if not path.is_file():
        raise ReportInputError(f"{path}: missing")
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportInputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and all(isinstance(e.get(k), str) for k in RECORD_KEYS) for e in entries
    ):
        raise ReportInputError(
            f"{path}: expected a list of objects with string keys {list(RECORD_KEYS)}"
        )
    return [LeftOut.from_record(entry) for entry in entries]


def discover_reference(folder: str | Path) -> dict[str, list[Path]]:
    """The results of one committed reference folder, by kind (as :func:`discover`).

    Its top-level ``*.csv`` are sweeps, except those whose name says ``kernel`` and the
    ``FILE.samples.csv`` of a sweep's timed calls (read with it, for intervals);
    ``profiles/*/`` with a ``tables/`` folder are profiles.  A folder with none of these
    is an error: a reference that draws nothing is a mistake in the path.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportInputError(f"{folder}: no such reference folder")
    sweeps: list[Path] = []
    kernel: list[Path] = []
    for csv_path in sorted(folder.glob("*.csv")):
        if csv_path.name.endswith(".samples.csv"):
            continue  # the timed calls of the sweep beside it
        (kernel if "kernel" in csv_path.stem else sweeps).append(csv_path)
    profiles = sorted(p for p in (folder / "profiles").glob("*") if (p / "tables").is_dir())
    if not (sweeps or kernel or profiles):
        raise ReportInputError(
            f"{folder}: holds no result (no *.csv at its top, no profiles/*/tables/)"
        )
    return {"sweeps": sweeps, "kernel_bandwidth": kernel, "profiles": profiles}


def _load_reference(folder: str | Path) -> tuple[list[Run], list[KernelBandwidth], list[Profile]]:
    """Everything in one reference folder, named ``<folder>/<file>`` and tagged with it."""
    machine = Path(folder).name
    found = discover_reference(folder)

    def tag(item):
        return replace(item, name=f"{machine}/{item.name}", machine=machine)

    return (
        [tag(load_sweep(p)) for p in found["sweeps"]],
        [tag(load_kernel_bandwidth(p)) for p in found["kernel_bandwidth"]],
        [tag(load_profile(p)) for p in found["profiles"]],
    )


def load_inputs(
    sweeps: Sequence[str | Path],
    kernel_bandwidth: Sequence[str | Path] = (),
    profiles: Sequence[str | Path] = (),
    not_measured: str | Path | None = None,
    references: Sequence[str | Path] = (),
) -> Inputs:
    """Load every named input; the first bad one raises :class:`ReportInputError`.

    ``references`` are folders measured elsewhere (:func:`discover_reference`); their
    results join this run's, each tagged with the folder's name as its machine.
    """
    names = [Path(p).name for p in references]
    if len(set(names)) < len(names):
        raise ReportInputError(f"two reference folders share a name: {list(map(str, references))}")
    loaded = [_load_reference(folder) for folder in references]
    reference_runs = [run for runs, _, _ in loaded for run in runs]
    if not sweeps and not reference_runs:
        raise ReportInputError(
            "no sweep result given: the report needs at least one ring.bench CSV "
            "(e.g. results/cpu/cpu_sweep.csv from `snakemake --cores 8 cpu`)"
        )
    runs = [load_sweep(p) for p in sweeps]
    paths = [Path(p).resolve() for p in sweeps]
    if len(set(paths)) < len(paths):
        raise ReportInputError(f"the same sweep file is given twice: {[str(p) for p in sweeps]}")
    # Runs are labelled by file name; the folder joins the label only where names repeat.
    stems = [run.name for run in runs]
    runs = [
        replace(run, name=f"{run.csv_path.parent.name}/{run.name}")
        if stems.count(run.name) > 1
        else run
        for run in runs
    ]
    return Inputs(
        runs=runs + reference_runs,
        kernel_bandwidth=[load_kernel_bandwidth(p) for p in kernel_bandwidth]
        + [k for _, kernels, _ in loaded for k in kernels],
        profiles=[load_profile(p) for p in profiles] + [p for _, _, found in loaded for p in found],
        left_out=None if not_measured is None else load_not_measured(not_measured),
    )
