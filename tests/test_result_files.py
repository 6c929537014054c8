"""A result is one unit: ``FILE.csv``, ``FILE.json`` (with the CSV's and the samples'
SHA-256) and ``FILE.samples.csv``.  ``merge`` writes or removes the samples with the pair,
and every reader (``merge``, ``ring.report``, ``ring.model fit``) refuses a CSV or samples
file that is not the one its JSON names, in one line; the committed references carry
their hashes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import ring.bench.ceilings
from ring.bench.__main__ import main
from ring.bench.results import check_pair, file_sha256, samples_path
from ring.model.costs import ModelInputError
from ring.model.data import load_groups
from ring.report.load import ReportInputError, load_run

TINY = ["-b", "1K", "-e", "64K", "-f", "4", "-n", "3", "-w", "1"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def small_ceilings(monkeypatch):
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: 1 << 20)


def _run(path: Path, *args: str) -> Path:
    assert main([*TINY, *args, "--out", str(path)]) == 0
    return path


def _error_line(capsys) -> str:
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ring.bench: error: "), lines
    return lines[0]


def test_a_run_records_the_hash_of_its_samples(tmp_path):
    out = _run(tmp_path / "r.csv")
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["samples_sha256"] == file_sha256(samples_path(out))
    assert check_pair(out, document) is None


def test_merge_writes_the_samples_of_its_inputs_with_the_pair(tmp_path, capsys):
    a = _run(tmp_path / "a.csv", "--backend", "cpu", "--nodes", "2")
    b = _run(tmp_path / "b.csv", "--backend", "numpy-direct", "--nodes", "2")
    merged = tmp_path / "m.csv"
    assert main(["merge", "--out", str(merged), str(a), str(b)]) == 0
    assert "and its samples" in capsys.readouterr().out
    calls = samples_path(merged).read_text().splitlines()
    inputs = [samples_path(p).read_text().splitlines() for p in (a, b)]
    assert len(calls) - 1 == sum(len(lines) - 1 for lines in inputs)
    assert check_pair(merged, json.loads(merged.with_suffix(".json").read_text())) is None
    load_run(merged)  # the report takes it


def test_merge_over_an_earlier_merge_removes_its_stale_samples(tmp_path, capsys):
    # The reproducer: merge --out X.csv over an existing run kept the old X.samples.csv.
    a = _run(tmp_path / "a.csv", "--backend", "cpu", "--nodes", "2")
    b = _run(tmp_path / "b.csv", "--backend", "numpy-direct", "--nodes", "2")
    merged = tmp_path / "m.csv"
    assert main(["merge", "--out", str(merged), str(a), str(b)]) == 0
    assert samples_path(merged).is_file()
    samples_path(b).unlink()  # an input without samples: the merge can have none
    assert main(["merge", "--out", str(merged), str(a), str(b)]) == 0
    assert "(no samples)" in capsys.readouterr().out
    assert not samples_path(merged).exists()
    assert "samples_sha256" not in json.loads(merged.with_suffix(".json").read_text())


def test_stale_samples_beside_a_pair_are_refused_by_every_reader(tmp_path, capsys):
    first = _run(tmp_path / "first.csv", "--seed", "1")
    out = _run(tmp_path / "r.csv", "--seed", "2")
    samples_path(out).write_bytes(samples_path(first).read_bytes())  # another run's calls
    with pytest.raises(ReportInputError, match=r"r\.samples\.csv does not match .*r\.json"):
        load_run(out)
    with pytest.raises(ModelInputError, match="samples_sha256"):
        load_groups([out])
    assert main(["merge", "--out", str(tmp_path / "m.csv"), str(out)]) == 2
    assert "samples_sha256" in _error_line(capsys)


def test_a_csv_with_another_runs_json_is_refused_by_every_reader(tmp_path, capsys):
    first = _run(tmp_path / "first.csv", "--seed", "1")
    out = _run(tmp_path / "r.csv", "--seed", "2")
    out.write_bytes(first.read_bytes())  # one run's CSV, the other's JSON
    expected = f"{out} does not match {out.with_suffix('.json')}"
    with pytest.raises(ReportInputError) as report:
        load_run(out)
    assert str(report.value).startswith(expected) and "\n" not in str(report.value)
    with pytest.raises(ModelInputError) as model:
        load_groups([out])
    assert str(model.value).startswith(expected)
    assert main(["merge", "--out", str(tmp_path / "m.csv"), str(out)]) == 2
    assert expected in _error_line(capsys)


def test_the_report_and_model_commands_say_the_mismatch_in_one_line(tmp_path):
    first = _run(tmp_path / "first.csv", "--seed", "1")
    out = _run(tmp_path / "r.csv", "--seed", "2")
    out.write_bytes(first.read_bytes())
    report = ["--figures", str(tmp_path / "f"), "--out", str(tmp_path / "report")]
    for command in (
        ["ring.model", "fit", str(out), "--out", str(tmp_path / "fit.json")],
        ["ring.report", "--sweep", str(out), *report],
    ):
        done = subprocess.run(
            [sys.executable, "-m", *command], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 2, (command, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "does not match" in lines[0], done.stderr
    assert not (tmp_path / "fit.json").exists()


def _committed_pairs() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "results/reference", "ring/model/defaults"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if name.endswith(".json") and (ROOT / name).with_suffix(".csv").is_file()
    ]


def test_every_committed_result_carries_the_hash_of_its_csv():
    pairs = _committed_pairs()
    assert pairs
    for json_path in pairs:
        document = json.loads(json_path.read_text())
        csv_path = json_path.with_suffix(".csv")
        assert document.get("csv_sha256") == file_sha256(csv_path), json_path
        assert check_pair(csv_path, document) is None, json_path
