"""One Nsight Systems profile: the tidy tables ``python -m ring.nsys`` wrote, its summary,
and the bench run it wrapped (which says what was profiled: backend, N, size)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .files import ReportInputError, read_csv

__all__ = ["Profile", "load_profile"]


@dataclass(frozen=True)
class Profile:
    """Tidy tables of one ``nsys`` profile; a table is absent when its report had no data."""

    name: str
    path: Path
    tables: dict[str, pd.DataFrame]
    summary: str | None
    machine: str = ""
    # The profiled bench run's rows (bench.csv beside the tables), where it is there.
    bench: pd.DataFrame | None = None


def load_profile(path: str | Path) -> Profile:
    """Read ``<profile>/tables/*.csv`` (and ``summary.md``, ``bench.csv`` when present)."""
    path = Path(path)
    tables_dir = path / "tables"
    if not tables_dir.is_dir():
        raise ReportInputError(
            f"{tables_dir}: missing; `python -m ring.nsys tables --out {tables_dir} ...` "
            "writes the profile tables there"
        )
    from ...nsys.tables import COLUMNS, NsysCsvError, read_tables

    try:
        # Checks every table's columns against the ones ring.nsys writes.
        read_tables(tables_dir)
    except (NsysCsvError, ValueError) as exc:
        raise ReportInputError(str(exc)) from exc
    tables = {
        name: read_csv(tables_dir / f"{name}.csv")
        for name in COLUMNS
        if (tables_dir / f"{name}.csv").is_file()
    }
    if not tables:
        raise ReportInputError(f"{tables_dir}: holds none of {[f'{n}.csv' for n in COLUMNS]}")
    summary_path = path / "summary.md"
    summary = summary_path.read_text(encoding="utf-8") if summary_path.is_file() else None
    bench_path = path / "bench.csv"
    bench = read_csv(bench_path) if bench_path.is_file() else None
    return Profile(path.name, path, tables, summary, bench=bench)
