"""The per-algorithm figures and table (ring.report.algorithms): the fastest algorithm at each
size read from one run, the report's other tables left comparing the plain ring with its
peers, and results holding only the ring said to be so."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ring.report import algorithms
from ring.report.build import build_figures
from ring.report.headline import headline_tables
from ring.report.inputs import load_inputs
from ring.report.model import ReportModel

ROOT = Path(__file__).resolve().parent.parent
THREE = ("ring", "direct", "rabenseifner")
SIZES = (1024, 4096, 16384, 65536)


def bench(out: Path, *args: str) -> Path:
    command = [sys.executable, "-m", "ring.bench", "-b", "1K", "-e", "64K", "-f", "4"]
    command += ["-n", "2", "-w", "1", "--seed", "3", *args, "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> dict[str, Path]:
    """A ring-only sweep with a peer, and an algorithm sweep of three algorithms, at N = 2,
    as the workflow lays them out."""
    root = tmp_path_factory.mktemp("results")
    (root / "cpu").mkdir()
    sweep = bench(root / "cpu" / "sweep_n2_float32.csv", "--backend", "cpu,numpy-direct")
    algo = bench(
        root / "cpu" / "algorithms_n2_float32.csv",
        *("--backend", "cpu", "--sync", "pairwise", "--algorithm", ",".join(THREE)),
    )
    return {"sweep": sweep, "algorithms": algo}


def synthetic_times(path: Path, tmp_path: Path) -> tuple[Path, dict[int, str]]:
    """A copy of ``path`` whose times make a different algorithm fastest at each size
    (random, non-zero); returns it and the fastest per size computed here."""
    rng = np.random.default_rng(11)
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    fastest: dict[int, str] = {}
    for size in SIZES:
        winner = THREE[SIZES.index(size) % len(THREE)]
        base = rng.uniform(50, 500)
        for row in rows:
            if int(row["bytes"]) != size:
                continue
            median = base if row["algorithm"] == winner else base * rng.uniform(1.2, 3.0)
            row.update(time_us=median, time_us_p25=median * 0.9, time_us_p75=median * 1.1)
        fastest[size] = winner
    out = tmp_path / "cpu" / path.name
    out.parent.mkdir(parents=True)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    shutil.copy(path.with_suffix(".json"), out.with_suffix(".json"))
    return out, fastest


def test_fastest_per_size_is_the_lowest_median_of_one_run(measured, tmp_path):
    path, expected = synthetic_times(measured["algorithms"], tmp_path)
    model = ReportModel(load_inputs([path]))
    (panel,) = algorithms.panels(model.algorithm_rows, "cpu")
    assert set(panel.algorithms) == set(THREE) and not panel.only_ring
    fastest = algorithms.fastest_per_size(panel.rows)
    assert dict(zip(fastest["bytes"], fastest["fastest"], strict=True)) == expected
    with path.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["backend"] == "cpu"]
    for r in fastest.itertuples():
        at = sorted(float(x["time_us"]) for x in rows if int(x["bytes"]) == r.bytes)
        assert r.time_us == pytest.approx(at[0]) and r.margin == pytest.approx(at[1] / at[0])
    # The table names the winner of each stretch of sizes; the figure is drawn.
    table = algorithms.fastest_table(model)
    assert [row[3] for row in table.rows] == [expected[s] for s in SIZES]
    figures = {f.spec.name: f for f in build_figures(model, tmp_path / "figures")}
    assert figures["algorithms_cpu"].drawn
    assert "no mpi ring results" in figures["algorithms_mpi"].missing


def test_other_tables_still_compare_the_plain_ring_with_its_peers(measured):
    ring_only = ReportModel(load_inputs([measured["sweep"]]))
    both = ReportModel(load_inputs([measured["sweep"], measured["algorithms"]]))
    # The algorithm run adds no series to the tables (no second "cpu pairwise" line, no
    # other algorithm), and the per-algorithm figure reads that run.
    assert set(both.rows["series"]) == set(ring_only.rows["series"])
    assert set(both.rows["run"]) == {"sweep_n2_float32"}
    tables = {t.title: t.rows for t in headline_tables(both)}
    before = {t.title: t.rows for t in headline_tables(ring_only)}
    fastest = tables.pop("Fastest algorithm per size")
    assert algorithms.ONLY_RING in before.pop("Fastest algorithm per size")[0][3]
    assert tables == before
    assert {row[-1] for row in fastest} == {"algorithms_n2_float32"}
    (panel,) = algorithms.panels(both.algorithm_rows, "cpu")
    assert panel.run == "algorithms_n2_float32" and panel.sync == "pairwise"


def test_results_with_the_ring_only_say_so():
    reference = ROOT / "results" / "reference" / "amd-epyc-2core"
    model = ReportModel(load_inputs([], references=[reference]))
    found = algorithms.panels(model.algorithm_rows, "cpu") + algorithms.panels(
        model.algorithm_rows, "mpi"
    )
    assert found and all(p.only_ring and p.machine == "amd-epyc-2core" for p in found)
    table = algorithms.fastest_table(model)
    assert table is not None
    assert all(algorithms.ONLY_RING in row[3] for row in table.rows)
