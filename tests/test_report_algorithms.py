"""The per-algorithm figures and table (ring.report.algorithms): the fastest algorithm at each
size read from one run, the report's other tables left comparing the plain ring with its
peers, and results holding only the ring said to be so."""

from __future__ import annotations

import csv
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from report_helpers import rehash
from test_bench import SMALL_CEILINGS_ENV

from ring.report import algorithms, analysis, best_of, trust
from ring.report.build import build_figures
from ring.report.cost_model import cost_model_of, measured_group
from ring.report.fmt import format_number
from ring.report.headline import headline_tables
from ring.report.inputs import load_inputs
from ring.report.model import ReportModel

ROOT = Path(__file__).resolve().parent.parent
THREE = ("ring", "direct", "rabenseifner")
SIZES = (1024, 4096, 16384, 65536)
SLICES_WIN = {16384: "ring", 65536: "direct"}


def bench(out: Path, *args: str) -> Path:
    command = [sys.executable, "-m", "ring.bench", "-b", "1K", "-e", "64K", "-f", "4"]
    command += ["-n", "2", "-w", "1", "--seed", "3", *args, "--out", str(out)]
    env = {**os.environ, **SMALL_CEILINGS_ENV}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
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
    # As the workflow runs it: the algorithms beside the peer, in one run.
    beside = bench(
        root / "beside" / "cpu" / "algorithms_n2_float32.csv",
        *("--backend", "cpu,numpy-direct", "--sync", "pairwise", "--algorithm", ",".join(THREE)),
    )
    return {"sweep": sweep, "algorithms": algo, "beside": beside}


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
    rehash(out)
    return out, fastest


@pytest.mark.slow
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
    # Our fastest against the peer is the one table that reads every algorithm.
    best_of = tables.pop("Our fastest against the fastest peer")
    assert {row[3] for row in before.pop("Our fastest against the fastest peer")} == {
        "cpu pairwise (nodes)"
    }
    assert best_of and all(row[3].startswith("cpu pairwise") for row in best_of)
    assert tables == before
    assert {row[-1] for row in fastest} == {"algorithms_n2_float32"}
    (panel,) = algorithms.panels(both.algorithm_rows, "cpu")
    assert panel.run == "algorithms_n2_float32" and panel.sync == "pairwise"


def test_an_algorithm_runs_peer_adds_no_series_the_sweep_measured(measured):
    """The peers of an algorithm run are series of the tables and figures only where no
    other run measured them: beside the sweep, its numpy-direct stays out, and the
    findings' table reads it (our fastest of three algorithms against it, one run)."""
    both = ReportModel(load_inputs([measured["sweep"], measured["beside"]]))
    assert set(both.rows["series"]) == {"cpu pairwise", "numpy-direct"}
    assert set(both.rows["run"]) == {"sweep_n2_float32"}
    alone = ReportModel(load_inputs([measured["beside"]]))
    assert set(alone.rows["series"]) == {"cpu pairwise", "numpy-direct"}
    points = both.regime_points
    beside = points[points["run"] != "sweep_n2_float32"]
    assert len(beside) == len(SIZES) and set(beside["peer"]) == {"numpy-direct"}
    # Our fastest of the three algorithms (the plain ring's label names it after the backend).
    ours = {"cpu ring pairwise (nodes)"} | {f"cpu pairwise {a} (nodes)" for a in THREE[1:]}
    assert set(beside["ours"]) <= ours, set(beside["ours"])


def test_results_with_the_ring_only_say_so(tmp_path):
    # The committed ring-only sweeps, without the reference's algorithm runs.
    reference = tmp_path / "amd-epyc-2core"
    reference.mkdir()
    for name in ("cpu_sweep.csv", "cpu_sweep.json", "mpi_sweep.csv", "mpi_sweep.json"):
        shutil.copy(ROOT / "results" / "reference" / "amd-epyc-2core" / name, reference)
    model = ReportModel(load_inputs([], references=[reference]))
    found = algorithms.panels(model.algorithm_rows, "cpu") + algorithms.panels(
        model.algorithm_rows, "mpi"
    )
    assert found and all(p.only_ring and p.machine == "amd-epyc-2core" for p in found)
    table = algorithms.fastest_table(model)
    assert table is not None
    assert all(algorithms.ONLY_RING in row[3] for row in table.rows)


def with_slices(path: Path, out_dir: Path) -> tuple[Path, dict[tuple[str, str, int], float]]:
    """A copy of the algorithm run ``path`` with every row measured again by slices, one per
    core (the node threads' rows two per core): by slices the ring is the fastest at 16 KiB
    and direct at 64 KiB, every other slices row slower than the node threads' slowest;
    returns it and every cpu row's median by (algorithm, executor, size)."""
    rng = np.random.default_rng(5)
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    slices = [{**r, "executor": "slices"} for r in rows]
    for row in slices:
        at = [float(r["time_us"]) for r in rows if r["bytes"] == row["bytes"]]
        wins = SLICES_WIN.get(int(row["bytes"])) == row["algorithm"]
        median = min(at) * 0.5 if wins else max(at) * rng.uniform(1.5, 3.0)
        row.update(time_us=median, time_us_p25=median * 0.9, time_us_p75=median * 1.1)
        row.update(threads_per_core="1", traffic_GBps="")
    for row in rows:
        row["threads_per_core"] = "2"
    out = out_dir / "cpu" / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows + slices)
    shutil.copy(path.with_suffix(".json"), out.with_suffix(".json"))
    rehash(out)
    times = {(r["algorithm"], r["executor"], int(r["bytes"])): float(r["time_us"]) for r in rows}
    times.update({(r["algorithm"], "slices", int(r["bytes"])): float(r["time_us"]) for r in slices})
    return out, times


@pytest.mark.slow
def test_slices_rows_are_series_of_their_own_in_the_panel_and_its_fastest(measured, tmp_path):
    path, times = with_slices(measured["algorithms"], tmp_path)
    model = ReportModel(load_inputs([path]))
    (panel,) = algorithms.panels(model.algorithm_rows, "cpu")
    # Library order, each algorithm on the node threads before by slices.
    assert panel.algorithms == [
        "ring", "ring (slices)", "rabenseifner", "rabenseifner (slices)", "direct",
        "direct (slices)",
    ]  # fmt: skip
    # The node threads ran two per core, the slices one: the title says whose.
    assert panel.title.endswith(f"{format_number(2.0)} per core (nodes): oversubscribed")
    fastest = algorithms.fastest_per_size(panel.rows)
    winners = dict(zip(fastest["bytes"], fastest["fastest"], strict=True))
    assert {winners[s] for s in SLICES_WIN} == {"ring (slices)", "direct (slices)"}
    for r in fastest.itertuples():
        at = {k: t for k, t in times.items() if k[2] == r.bytes}
        algorithm, executor, _ = min(at, key=at.get)
        assert r.fastest == algorithm + (" (slices)" if executor == "slices" else "")
        assert r.time_us == pytest.approx(min(at.values()))
    figures = {f.spec.name: f for f in build_figures(model, tmp_path / "figures")}
    assert figures["algorithms_cpu"].drawn
    assert "dashed" in figures["algorithms_cpu"].spec.caption


def test_best_of_ours_takes_either_executor_against_the_fastest_peer(measured, tmp_path):
    path, times = with_slices(measured["algorithms"], tmp_path)
    model = ReportModel(load_inputs([measured["sweep"], path]))
    with measured["sweep"].open(newline="") as handle:
        sweep = list(csv.DictReader(handle))
    peer = {int(r["bytes"]): float(r["time_us"]) for r in sweep if r["backend"] == "numpy-direct"}
    for r in sweep:
        if r["backend"] == "cpu":  # the ring-only sweep's ring, on the node threads
            times[("ring", "sweep", int(r["bytes"]))] = float(r["time_us"])
    pairs = best_of.best_of_ours(model.algorithm_rows).set_index("bytes")
    assert sorted(pairs.index) == sorted(peer)
    for size, peer_time in peer.items():
        at = {k: t for k, t in times.items() if k[2] == size}
        algorithm, executor, _ = min(at, key=at.get)
        name = "cpu pairwise" + ("" if algorithm == "ring" else f" {algorithm}")
        name += " (slices)" if executor == "slices" else " (nodes)"
        row = pairs.loc[size]
        assert (row["ours"], row["peer"]) == (name, "numpy-direct")
        assert row["ratio"] == pytest.approx(peer_time / min(at.values()))
        assert row["run_ours"] == ("sweep_n2_float32" if executor == "sweep" else path.stem)
        # 3 algorithms x 2 executors (the sweep's ring is the node threads' ring again).
        assert row["contenders"] == 6
    assert pairs.loc[16384, "ours"] == "cpu pairwise (slices)"
    assert pairs.loc[65536, "ours"] == "cpu pairwise direct (slices)"
    table = next(t for t in headline_tables(model) if t.title == best_of.TITLE)
    assert {row[3] for row in table.rows} == set(pairs["ours"])
    # One row per stretch of sizes with the same two winners and the same one ahead.
    sides = [(r.ours, r.peer, r.ratio > 1) for r in pairs.sort_index().itertuples()]
    assert len(table.rows) == 1 + sum(a != b for a, b in itertools.pairwise(sides))
    # The other tables: the ring by slices beside the node threads' and the peer; the node
    # threads' ring of the algorithm run stays out (the sweep measured it), and the slices'
    # traffic, which the ring's formula does not count, is left out.
    assert set(model.rows["series"]) == {"cpu pairwise", "cpu pairwise (slices)", "numpy-direct"}
    slices = model.rows[model.rows["series"] == "cpu pairwise (slices)"]
    assert set(slices["run"]) == {path.stem} and slices["traffic_GBps"].isna().all()
    ratios = model.comparison("cpu_vs_peers").table
    assert "cpu pairwise (slices)" in set(ratios["fast"])
    assert not set(trust.oversubscribed(model.rows)["series"]) & {"cpu pairwise (slices)"}
    # Pairwise over barrier compares the node threads' syncs; slices rows wait on neither.
    rows = model.rows
    barrier = rows[rows["series"] == "cpu pairwise"].assign(sync="barrier", series="cpu barrier")
    syncs = analysis.comparisons(pd.concat([rows, barrier.assign(base="cpu barrier")]))
    (table,) = [c.table for c in syncs if c.name == "pairwise_vs_barrier"]
    assert set(table["fast"]) == {"cpu pairwise"} and set(table["slow"]) == {"cpu barrier"}


@pytest.mark.slow
def test_cost_model_section_fits_the_node_threads_beside_slices_rows(measured, tmp_path):
    path, _ = with_slices(measured["algorithms"], tmp_path)
    fit = tmp_path / "cpu" / "model_fit.json"
    command = [sys.executable, "-m", "ring.model", "fit", str(path), "--out", str(fit)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    model = ReportModel(load_inputs([path]))
    section = cost_model_of(model)
    assert "this run's own fit" in section.source
    (only,) = section.fits
    assert "executor" not in only[0].key
    group = measured_group(*only)
    assert group is not None and all(p.nbytes > 0 for p in group.points)
    # Every point fitted is a node threads' row: 3 algorithms x 4 sizes, none by slices.
    assert len(group.points) == len(THREE) * len(SIZES)


def test_shared_buffer_rows_are_series_of_their_own_in_the_mpi_panel():
    """MPI rows on shared buffers (--buffers shared) are lines of their own, after the same
    algorithm on host buffers, and win the sizes where they are fastest."""
    rng = np.random.default_rng(8)
    records = []
    for algorithm, buffers, size in itertools.product(
        ("ring", "direct"), ("host", "shared"), SIZES
    ):
        time = rng.uniform(10, 20) * (0.3 if buffers == "shared" and size > 4096 else 1.0)
        records.append(
            {
                "backend": "mpi", "sync": "none", "nodes": 2, "dtype": "float32", "op": "sum",
                "run": "algorithms_n2_float32", "algorithm": algorithm, "executor": "",
                "buffers": buffers, "bytes": size, "time_us": time, "time_us_p25": time * 0.9,
                "time_us_p75": time * 1.1,
            }
        )  # fmt: skip
    rows = pd.DataFrame.from_records(records)
    (panel,) = algorithms.panels(rows, "mpi")
    assert panel.algorithms == ["ring", "ring (shared)", "direct", "direct (shared)"]
    # The line's style comes from the buffers column, not from its name.
    assert [panel.ran(name) for name in panel.algorithms] == ["", "shared", "", "shared"]
    fastest = algorithms.fastest_per_size(panel.rows).set_index("bytes")
    for size in SIZES:
        at = rows[rows["bytes"] == size].sort_values("time_us").iloc[0]
        suffix = " (shared)" if at["buffers"] == "shared" else ""
        assert fastest.loc[size, "fastest"] == at["algorithm"] + suffix
    assert fastest.loc[65536, "fastest"].endswith(" (shared)")
