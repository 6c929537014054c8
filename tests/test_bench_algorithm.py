"""``--algorithm``: the CSV/JSON column, validation, interleaving and merging."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_bench import bench as bench_tiny

# The harness's own test helpers, its autouse fixtures (small ceilings, no MPI launcher
# in the environment) included.
from test_bench import outside_mpirun, small_ceilings  # noqa: F401 - autouse fixtures

from ring.bench.__main__ import main
from ring.bench.algorithms import DEFAULT_ALGORITHM, library_algorithms
from ring.bench.results import SAMPLE_COLUMNS, samples_path

SWEEP = ["-b", "8", "-e", "512", "-f", "8", "-n", "2", "-d", "float64"]


def rows_of(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def bench(tmp_path: Path, *args: str, name: str = "run.csv") -> tuple[int, Path]:
    return bench_tiny(tmp_path, *SWEEP, *args, name=name)


def test_library_list_starts_with_the_plain_ring():
    names = library_algorithms()
    assert names[0] == DEFAULT_ALGORITHM == "ring" and len(set(names)) == len(names)


def test_default_is_ring_and_peers_carry_their_own_name(tmp_path, capsys):
    code, out = bench(tmp_path, "--backend", "cpu,numpy-direct", "--nodes", "3")
    assert code == 0
    rows = rows_of(out)
    assert {(r["backend"], r["algorithm"]) for r in rows} == {
        ("cpu", "ring"),
        ("numpy-direct", "numpy-direct"),
    }
    assert all(r["wrong"] == "0" for r in rows)
    samples = rows_of(samples_path(out))
    # The point's keys and the call, then the variant columns naming the cpu series (a
    # numpy-direct call leaves them empty).
    assert list(samples[0]) == [*SAMPLE_COLUMNS, "inline_bytes", "executor"]
    assert {s["executor"] for s in samples if s["backend"] == "numpy-direct"} == {""}
    assert {(s["backend"], s["algorithm"]) for s in samples} == {
        ("cpu", "ring"),
        ("numpy-direct", "numpy-direct"),
    }
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["config"]["algorithms"] is None
    stages = {s["backend"]: s["algorithms"] for s in document["config"]["stages"]}
    assert stages == {"cpu": ["ring"], "numpy-direct": ["numpy-direct"]}
    assert document["backends"]["cpu"]["algorithms"] == list(library_algorithms())
    assert document["backends"]["numpy-direct"]["algorithms"] == []
    assert "# series cpu/pairwise/ring/N3" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nope", "unknown algorithm 'nope': expected one of ring"),
        ("ring,", "--algorithm 'ring,' has an empty item"),
    ],
)
def test_bad_algorithm_is_one_line_and_writes_nothing(tmp_path, capsys, value, message):
    code, out = bench(tmp_path, "--algorithm", value)
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not out.exists()


def test_every_requested_algorithm_is_a_series(tmp_path, capsys):
    names = library_algorithms()
    code, out = bench(
        tmp_path, "--backend", "cpu", "--nodes", "2,5", "--algorithm", ",".join(names)
    )
    assert code == 0
    rows = rows_of(out)
    assert {(r["algorithm"], r["nodes"]) for r in rows} == {
        (a, n) for a in names for n in ("2", "5")
    }
    assert all(r["wrong"] == "0" for r in rows)
    # Interleaved: every series at one size before any series at the next.
    table = [line for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert [int(line.split()[0]) for line in table] == sorted(int(r["bytes"]) for r in rows)
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["config"]["algorithms"] == list(names)


def test_merge_refuses_a_file_of_schema_1_naming_the_migration(tmp_path, capsys):
    assert bench(tmp_path, "--backend", "cpu", name="new.csv")[0] == 0
    assert bench(tmp_path, "--backend", "numpy-direct", name="old.csv")[0] == 0
    old = tmp_path / "old.csv"
    rows = rows_of(old)
    columns = [c for c in rows[0] if c != "algorithm"]
    with open(old, "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    document = json.loads(old.with_suffix(".json").read_text())
    old.with_suffix(".json").write_text(json.dumps({**document, "schema": 1}))
    merged = tmp_path / "merged.csv"
    capsys.readouterr()
    assert main(["merge", "--out", str(merged), str(tmp_path / "new.csv"), str(old)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "old.json: ring.bench schema 1, this reader takes 2" in err
    assert "tidy CSV schema 2" in err and not merged.exists()


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ("2", "old.json: ring.bench schema '2' (a str, not a whole number), this reader takes 2"),
        (None, "old.json: no ring.bench schema, this reader takes 2"),
        (1.0, "old.json: ring.bench schema 1.0 (a float, not a whole number), this reader takes 2"),
    ],
)
def test_a_schema_that_is_not_the_number_is_shown_as_written(tmp_path, capsys, schema, said):
    """ "2" is not schema 2: said as "schema 2, this reader takes 2" it read as a bug."""
    assert bench(tmp_path, "--backend", "cpu", name="new.csv")[0] == 0
    assert bench(tmp_path, "--backend", "cpu", name="old.csv")[0] == 0
    old = tmp_path / "old.json"
    document = json.loads(old.read_text())
    old.write_text(json.dumps({**document, "schema": schema}))
    capsys.readouterr()
    merged = tmp_path / "merged.csv"
    assert (
        main(["merge", "--out", str(merged), str(tmp_path / "new.csv"), str(tmp_path / "old.csv")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err


def test_the_report_reads_several_algorithms_and_labels_them(tmp_path, capsys):
    from ring.report.derive.series import name
    from ring.report.load import load_run

    code, out = bench(tmp_path, "--backend", "cpu", "--algorithm", "ring,direct")
    assert code == 0
    rows = load_run(out).rows.to_dict("records")
    assert {r["algorithm"]: name(r) for r in rows} == {
        "direct": "cpu direct (nodes)",
        "ring": "cpu ring (nodes)",
    }
