"""Fit files are checked when they are read, and ``ring.model fit`` refuses what it cannot
fit honestly: each in one line naming the file.  The reproducers: a fit with a NaN, a
negative or an infinite coefficient in ``RING_MODEL_FIT`` (``auto`` raised ``min() arg is
an empty sequence``, ``table`` a traceback, ``predict`` printed a negative time); a
one-row CSV and ``threads_per_core`` of NaN or 0 were fitted."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ring
import ring.auto
import ring.bench.ceilings
from ring.bench.__main__ import main as bench
from ring.bench.results import file_sha256
from ring.model import auto
from ring.model.costs import ModelInputError
from ring.model.decisions import decisions, write_decisions
from ring.model.table import load_fits

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "ring" / "model" / "defaults" / "intel-xeon-2core" / "model_fit.json"


@pytest.fixture(autouse=True)
def small_ceilings(monkeypatch):
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: 1 << 20)


def _spoiled(tmp_path: Path, where: str, value) -> Path:
    """The committed cpu/mpi fit with one number replaced (``params.alpha``, ...)."""
    document = json.loads(DEFAULT.read_text())
    entry = document["fits"][0]
    *keys, last = where.split(".")
    for key in keys:
        entry = entry[key]
    if value is KeyError:
        del entry[last]
    else:
        entry[last] = value
    path = tmp_path / "fit.json"
    # json writes NaN and Infinity as JavaScript does, as a fit file so spoiled would hold.
    path.write_text(json.dumps(document))
    return path


def _model(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ring.model", *args], capture_output=True, text=True, timeout=300
    )


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ring.model: "), done.stderr
    return lines[0]


BAD = {
    "NaN alpha": ("params.alpha", math.nan, "coefficient alpha is nan"),
    "negative beta": ("params.beta", -1e-9, "coefficient beta is -1e-09"),
    "infinite gamma": ("params.gamma", math.inf, "coefficient gamma is inf"),
    "no alpha": ("params.alpha", KeyError, "KeyError('alpha')"),
}


@pytest.mark.parametrize("where, value, said", BAD.values(), ids=BAD)
def test_a_bad_fit_file_is_refused_in_one_line_naming_it(tmp_path, where, value, said):
    path = _spoiled(tmp_path, where, value)
    with pytest.raises(ModelInputError) as refused:
        load_fits(path)
    assert str(refused.value).startswith(f"{path}: fit 0") and said in str(refused.value)
    for command in (
        ["table", "--fit", str(path)],
        ["predict", "--fit", str(path), "--algorithm", "ring", "--nodes", "4", "--bytes", "1M"],
    ):
        line = _one_line(_model(*command))
        assert str(path) in line and said in line


def test_auto_with_a_nan_fit_names_the_file(tmp_path, monkeypatch):
    """The model's pick and the decision table written from the fit both refuse it."""
    path = _spoiled(tmp_path, "params.alpha", math.nan)
    monkeypatch.setenv(auto.FIT_ENV, str(path))
    auto.reset()
    try:
        with pytest.raises(ModelInputError, match=f"{path}: fit 0 .*coefficient alpha is nan"):
            auto.choose("cpu", "allreduce", 2, 8192)
    finally:
        monkeypatch.delenv(auto.FIT_ENV)
        auto.reset()
    with pytest.raises(ModelInputError, match=f"{path}: fit 0 .*coefficient alpha is nan"):
        write_decisions(path, tmp_path / "table.json")
    assert not (tmp_path / "table.json").exists()


def _spoiled_table(tmp_path: Path, pick: str) -> Path:
    """A decision table of the committed cpu fit whose first pick is ``pick``."""
    document = decisions(load_fits(DEFAULT))
    document["tables"][0]["picks"]["allreduce"]["2"]["threads"][0][1] = [pick]
    path = tmp_path / "table.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("spoil", ["unknown algorithm", "unknown candidate", "not json"])
def test_auto_with_a_bad_table_names_the_file(tmp_path, monkeypatch, spoil):
    path = _spoiled_table(tmp_path, "bogo-sort")
    if spoil == "not json":
        path.write_text("{")
    if spoil == "unknown candidate":  # a name the library lacks, consistent within the table
        document = json.loads(path.read_text())
        table = document["tables"][0]
        table["candidates"]["allreduce"].insert(0, "bogo-sort")
        for runs in table["picks"]["allreduce"]["2"].values():
            runs[0][1] = ["bogo-sort"]
        path.write_text(json.dumps(document))
    monkeypatch.setenv(ring.auto.TABLE_ENV, str(path))
    ring.auto.reset()
    try:
        buffers = [np.ones(1024), np.ones(1024)]
        with pytest.raises(ring.auto.AutoTableError, match=f"{path}: "):
            ring.allreduce(buffers, algorithm="auto")
        assert all((b == 1).all() for b in buffers)
    finally:
        monkeypatch.delenv(ring.auto.TABLE_ENV)
        ring.auto.reset()


def test_the_committed_fits_pass_the_check():
    for path in sorted((ROOT / "ring" / "model" / "defaults").glob("*/model_fit.json")):
        assert load_fits(path), path


def _sweep(tmp_path: Path, *sizes: str) -> Path:
    out = tmp_path / "r.csv"
    args = ["-b", sizes[0], "-e", sizes[-1], "-f", "4", "-n", "3", "-w", "1", "--nodes", "2"]
    assert bench([*args, "--algorithm", "ring,direct", "--out", str(out)]) == 0
    return out


def test_fit_refuses_a_one_size_csv(tmp_path):
    out = _sweep(tmp_path, "64K")
    line = _one_line(_model("fit", str(out), "--out", str(tmp_path / "fit.json")))
    assert str(out) in line and "1 size(s)" in line and "fewer than the 3" in line
    assert not (tmp_path / "fit.json").exists()


@pytest.mark.parametrize("placement", ["nan", "0"])
def test_fit_refuses_a_placement_column_that_is_not_a_count(tmp_path, placement):
    out = _sweep(tmp_path, "1K", "64K")
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert all(float(r["threads_per_core"]) > 0 for r in rows)
    rows[1]["threads_per_core"] = placement
    with open(out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    document = json.loads(out.with_suffix(".json").read_text())
    document["csv_sha256"] = file_sha256(out)  # a pair that matches: only the column is bad
    out.with_suffix(".json").write_text(json.dumps(document))
    line = _one_line(_model("fit", str(out), "--out", str(tmp_path / "fit.json")))
    assert f"{out}:3: threads_per_core is {placement!r}" in line
    assert not (tmp_path / "fit.json").exists()


def test_the_harness_refuses_a_bad_table_for_auto_before_measuring(tmp_path, capsys, monkeypatch):
    path = _spoiled_table(tmp_path, "bogo-sort")
    monkeypatch.setenv(ring.auto.TABLE_ENV, str(path))
    ring.auto.reset()
    try:
        out = tmp_path / "r.csv"
        assert bench(["--algorithm", "auto", "-b", "1K", "-e", "4K", "--out", str(out)]) == 2
    finally:
        monkeypatch.delenv(ring.auto.TABLE_ENV)
        ring.auto.reset()
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing measured
    [line] = captured.err.splitlines()
    assert line == f"ring.bench: error: RING_AUTO_TABLE: {path}: the cpu table names 'bogo-sort'"
    assert not out.exists()
