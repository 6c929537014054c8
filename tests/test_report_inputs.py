"""The report's bad input (a clear error naming the file, nothing written) and its number
formats."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from report_helpers import run_report, sweep_csvs

from ring.report import ReportInputError, build_report, collect_inputs
from ring.report.words.fmt import format_bytes, format_number

# --- bad input: a clear error naming the file, nothing written --------------------------


def bad_copy(results: Path, tmp_path: Path) -> Path:
    target = tmp_path / "cpu"
    shutil.copytree(results / "cpu", target)
    return target / "sweep_n2_float32.csv"


def existing_report(tmp_path: Path) -> tuple[Path, Path]:
    figures, report = tmp_path / "figures", tmp_path / "report"
    figures.mkdir()
    report.mkdir()
    (figures / "time_vs_size.png").write_bytes(b"earlier")
    (report / "index.html").write_text("earlier")
    return figures, report


@pytest.mark.slow
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing_csv", "sweep_n2_float32.csv: missing"),
        ("missing_json", "sweep_n2_float32.json: missing"),
        ("bad_json", "sweep_n2_float32.json: not valid JSON"),
        ("no_column", "not a ring.bench result, missing columns ['busbw_GBps']"),
        ("not_numeric", "column 'time_us' is not numeric in data row(s) [2]"),
        ("empty", "sweep_n2_float32.csv: empty file"),
        ("header_only", "sweep_n2_float32.csv: has a header but no rows"),
        ("bad_bool", "column 'shared_devices' holds ['maybe']"),
        # A result of an older schema is refused in one line naming the migration.
        ("schema_1_json", "ring.bench schema 1, this reader takes 2; schema 2 gives every row"),
        ("schema_1_csv", "no column executor (ring.bench schema 1); schema 2 gives every row"),
    ],
)
def test_bad_input_names_the_file_and_writes_nothing(results, tmp_path, damage, message):
    path = bad_copy(results, tmp_path)
    text = path.read_text()
    lines = text.splitlines()
    if damage == "missing_csv":
        path.unlink()
    elif damage == "missing_json":
        path.with_suffix(".json").unlink()
    elif damage == "bad_json":
        path.with_suffix(".json").write_text("{not json")
    elif damage == "no_column":
        header = lines[0].split(",")
        drop = header.index("busbw_GBps")
        kept = [",".join(c for i, c in enumerate(line.split(",")) if i != drop) for line in lines]
        path.write_text("\n".join(kept))
    elif damage == "not_numeric":
        cells = lines[2].split(",")
        cells[lines[0].split(",").index("time_us")] = "fast"
        path.write_text("\n".join([*lines[:2], ",".join(cells), *lines[3:]]))
    elif damage == "empty":
        path.write_text("")
    elif damage == "header_only":
        path.write_text(lines[0] + "\n")
    elif damage == "schema_1_json":
        meta = path.with_suffix(".json")
        meta.write_text(meta.read_text().replace('"schema": 2', '"schema": 1', 1))
    elif damage == "schema_1_csv":
        drop = lines[0].split(",").index("executor")
        kept = [",".join(c for i, c in enumerate(line.split(",")) if i != drop) for line in lines]
        path.write_text("\n".join(kept))
    elif damage == "bad_bool":
        cells = lines[2].split(",")
        cells[lines[0].split(",").index("shared_devices")] = "maybe"
        path.write_text("\n".join([*lines[:2], ",".join(cells), *lines[3:]]))
    figures, report = existing_report(tmp_path)
    with pytest.raises(ReportInputError) as error:
        others = [p for p in sweep_csvs(path.parent) if p != path and "confirm" not in p.name]
        build_report([*others, path], figures_dir=figures, out_dir=report)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(path.parent) in str(error.value)
    assert (figures / "time_vs_size.png").read_bytes() == b"earlier"
    assert (report / "index.html").read_text() == "earlier"
    assert sorted(p.name for p in report.iterdir()) == ["index.html"]


@pytest.mark.slow
def test_cli_bad_input_exit_2_without_traceback(results, tmp_path):
    missing = tmp_path / "nowhere" / "cpu_n2_float32.csv"
    sweeps = ["--sweep", str(results / "cpu" / "sweep_n4_float32.csv"), "--sweep", str(missing)]
    figures, out = str(tmp_path / "figures"), str(tmp_path / "report")
    done = run_report(*sweeps, "--figures", figures, "--out", out, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"ring.report: {missing}: missing"
    assert not (tmp_path / "report").exists()


def test_no_sweep_at_all_is_an_error(tmp_path):
    (tmp_path / "results").mkdir()
    chosen = collect_inputs(results=tmp_path / "results")
    with pytest.raises(ReportInputError, match="no result of this build given"):
        build_report(chosen["runs"], figures_dir=tmp_path / "f", out_dir=tmp_path / "r")


@pytest.mark.slow
def test_profile_without_tables_is_an_error(results, tmp_path):
    (tmp_path / "cpu").mkdir()
    with pytest.raises(ReportInputError, match=r"cpu/tables: missing"):
        build_report(
            [results / "cpu" / "sweep_n2_float32.csv"],
            profiles=[tmp_path / "cpu"],
            figures_dir=tmp_path / "f",
            out_dir=tmp_path / "r",
        )


@pytest.mark.slow
def test_malformed_profile_table_names_it(results, tmp_path):
    profile = tmp_path / "cpu"
    shutil.copytree(results / "profiles" / "cpu", profile)
    table = profile / "tables" / "osrt.csv"
    table.write_text(table.read_text().replace("total_ns", "total_time", 1))
    with pytest.raises(ReportInputError, match=re.escape(str(table))):
        build_report(
            [results / "cpu" / "sweep_n2_float32.csv"],
            profiles=[profile],
            figures_dir=tmp_path / "f",
            out_dir=tmp_path / "r",
        )


# --- numbers as the report writes them --------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (1.0, "1.00"),
        (0.012345, "0.0123"),
        (9.996, "10.0"),
        (99.96, "100"),
        (1234.5, "1,234"),
        (331712.0, "331,712"),
        (-2.5, "-2.50"),
        (float("nan"), "n/a"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


@pytest.mark.parametrize(
    ("size_", "text"),
    [(0, "0 B"), (1, "1 B"), (1000, "1,000 B"), (1024, "1 KiB"), (1536, "1,536 B"),
     (1 << 30, "1 GiB"), (3 << 20, "3 MiB")],
)  # fmt: skip
def test_format_bytes(size_, text):
    assert format_bytes(size_) == text
