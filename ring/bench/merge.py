"""``python -m ring.bench merge --out OUT.csv IN.csv...``: several runs, one result file.

Backends that run under ``mpirun`` need one launch per node count, apart from the
single-process backends; merging puts them in one table.  The merged CSV adds a ``run``
column (the index into the JSON's ``runs``), so every row keeps the environment and the
ceilings measured in its own run.  The top-level ``environment`` and ``ceilings`` are
those of the first input.

The merged files are one unit, as a run's are: each input's CSV must match the
``csv_sha256`` (and its samples the ``samples_sha256``) of its JSON, and the inputs'
per-call samples are merged into ``OUT.samples.csv`` when every input has them; when one
has none the output has none either, and an ``OUT.samples.csv`` left by an earlier merge
is removed with the pair's writing, so the report never draws intervals from another run.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from .cli import BenchInputError, BenchParser
from .results import (
    COLUMNS,
    SAMPLE_COLUMNS,
    SCHEMA,
    check_pair,
    columns_of,
    csv_text,
    output_problem,
    read_csv,
    samples_path,
    schema_problem,
    write_result_pair,
)
from .schema import VARIANT_COLUMNS

__all__ = ["merge", "merge_main"]

KEY = ("backend", "sync", "nodes", "dtype", "op", "bytes")


def _load(path: Path) -> tuple[list[str], list[dict], dict]:
    if path.suffix != ".csv":
        raise BenchInputError(f"merge input {str(path)!r} is not a .csv file")
    json_path = path.with_suffix(".json")
    for needed in (path, json_path):
        if not needed.is_file():
            raise BenchInputError(f"merge input {str(needed)!r} does not exist")
    try:
        columns, rows = read_csv(path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BenchInputError(f"cannot read {path}: {exc}") from None
    try:
        document = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchInputError(f"cannot read {json_path}: {exc}") from None
    if not isinstance(document, dict) or "schema" not in document:
        raise BenchInputError(f"{json_path} is not a ring.bench JSON of schema {SCHEMA}")
    old = schema_problem(json_path, document=document) or schema_problem(path, columns)
    if old:
        raise BenchInputError(old)
    missing = [name for name in COLUMNS if name not in columns]
    if missing:
        raise BenchInputError(f"{path} is not a ring.bench CSV: no column {', '.join(missing)}")
    mismatch = check_pair(path, document)
    if mismatch:
        raise BenchInputError(mismatch)
    return columns, rows, document


def _merged_samples(inputs: list[Path], out: Path) -> list[tuple[Path, str]]:
    """``OUT.samples.csv`` beside the pair: every input's samples, one after the other (the
    merged rows are unique by point, so each call stays with its point), or nothing when an
    input has none."""
    paths = [samples_path(path) for path in inputs]
    if not all(path.is_file() for path in paths):
        return []
    calls = []
    for path in paths:
        try:
            calls += read_csv(path)[1]
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise BenchInputError(f"cannot read {path}: {exc}") from None
    return [(samples_path(out), csv_text(calls, columns_of(calls, SAMPLE_COLUMNS)))]


def merge(inputs: list[Path], out: Path, command: list[str]) -> dict:
    loaded = [_load(Path(path)) for path in inputs]
    columns = list(COLUMNS)
    seen: dict[tuple, Path] = {}
    rows = []
    for index, (path, (names, run_rows, _)) in enumerate(zip(inputs, loaded, strict=True)):
        columns.extend(name for name in names if name not in columns)
        for row in run_rows:
            names_here = KEY + tuple(n for n in ("algorithm", *VARIANT_COLUMNS) if n in names)
            key = tuple((n, row[n]) for n in names_here)
            if key in seen:
                raise BenchInputError(
                    f"{path} and {seen[key]} both measure " + ", ".join(f"{n}={v}" for n, v in key)
                )
            seen[key] = path
            rows.append({**row, "run": index})
    columns.append("run")
    runs = [{"csv": str(path), **doc} for path, (_, _, doc) in zip(inputs, loaded, strict=True)]
    hosts = {run.get("environment", {}).get("host") for run in runs}
    if len(hosts) > 1:
        print(
            f"ring.bench merge: warning: the runs come from different hosts "
            f"({', '.join(sorted(map(str, hosts)))})",
            file=sys.stderr,
        )
    commits = {run.get("git_commit") for run in runs}
    wrong = [run.get("wrong_total") for run in runs]
    document = {
        "schema": SCHEMA,
        "command": list(command),
        "start_time": min(run["start_time"] for run in runs),
        "end_time": max(run["end_time"] for run in runs),
        "git_commit": commits.pop() if len(commits) == 1 else None,
        "git_dirty": any(run.get("git_dirty") for run in runs),
        "environment": runs[0].get("environment"),
        "ceilings": runs[0].get("ceilings"),
        "config": {"merged_from": [str(path) for path in inputs]},
        "backends": {k: v for run in runs for k, v in run.get("backends", {}).items()},
        "wrong_total": None if None in wrong else sum(int(w) for w in wrong if w is not None),
        "runs": runs,
    }
    try:
        write_result_pair(out, rows, columns, document, _merged_samples(inputs, out))
    except OSError as exc:
        raise BenchInputError(f"cannot write {out}: {exc.strerror or exc}") from None
    return document


def merge_main(argv: list[str], command: list[str]) -> int:
    parser = BenchParser(
        prog="python -m ring.bench merge",
        description="Combine ring.bench result files (CSV + JSON beside each) into one.",
    )
    parser.add_argument("--out", required=True, help="the merged FILE.csv (JSON beside it)")
    parser.add_argument("inputs", nargs="+", help="result CSVs, each with its JSON beside it")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.suffix != ".csv" or not out.stem:
        raise BenchInputError(f"--out {args.out!r} must name a .csv file (the JSON goes beside it)")
    inputs = [Path(path) for path in args.inputs]
    if out.resolve() in {path.resolve() for path in inputs}:
        raise BenchInputError(f"--out {args.out!r} is also an input")
    problem = output_problem(out)
    if problem:
        raise BenchInputError(problem)
    document = merge(inputs, out, command)
    samples = " and its samples" if samples_path(out).is_file() else " (no samples)"
    print(
        f"ring.bench merge: {len(inputs)} runs -> {out} and {out.with_suffix('.json')}"
        f"{samples} (wrong elements: {document['wrong_total']})"
    )
    return 0
