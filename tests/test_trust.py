"""Numbers a performance engineer can trust: ceilings, byte counting, placement, samples,
confidence intervals and the findings built from them."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest
from test_bench import SMALL_CEILINGS_ENV

import ring.bench.ceilings as ceilings
from ring.bench.__main__ import main as bench_main
from ring.bench.backends import ring_traffic_bytes
from ring.bench.environment import mpi_version
from ring.planning import store
from ring.report import build_report

# The real one: small_ceilings below replaces it for every test of this module.
HOST_ARRAY_BYTES = ceilings.host_array_bytes
MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK")


@pytest.fixture(autouse=True)
def small_ceilings(monkeypatch):
    monkeypatch.setattr(ceilings, "host_array_bytes", lambda: 1 << 20)
    for name in MPI_ENV:
        monkeypatch.delenv(name, raising=False)


def read(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


# --- byte counting ------------------------------------------------------------------------


def test_copy_counts_its_write_allocate_read_below_the_threshold():
    assert ceilings.copy_traffic_bytes(1000, threshold=4096) == 3000
    assert ceilings.copy_traffic_bytes(4096, threshold=4096) == 2 * 4096
    assert ceilings.copy_traffic_bytes(10, threshold=None) in (20, 30)


@pytest.mark.parametrize("nodes", [2, 3, 4, 7])
def test_ring_traffic_counts_adds_and_copies(nodes):
    size = 1_000_003
    # Reduce-scatter: (N-1) in-place adds of every chunk, 3 bytes per byte; all-gather:
    # every chunk copied to N-1 nodes, 3 bytes per byte below the threshold, 2 above.
    assert ring_traffic_bytes(size, nodes, threshold=1 << 40) == 6 * (nodes - 1) * size
    assert ring_traffic_bytes(size, nodes, threshold=1) == 5 * (nodes - 1) * size
    assert ring_traffic_bytes(size, 1) == 0


def test_last_level_cache_is_the_largest_data_cache():
    size, source = ceilings.last_level_cache()
    folders = sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"))
    data = [
        (int((f / "level").read_text()), ceilings._sysfs_size((f / "size").read_text()))
        for f in folders
        if (f / "type").read_text().strip() != "Instruction"
    ]
    if data:
        assert (size, source) == (max(data)[1], f"sysfs L{max(data)[0]}")
    else:
        assert size > 0 and source


def test_ceiling_arrays_are_four_last_level_caches_unless_the_environment_says(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.delenv("RING_CEILING_BYTES", raising=False)
    assert HOST_ARRAY_BYTES() == 4 * ceilings.last_level_cache()[0]
    monkeypatch.setenv("RING_CEILING_BYTES", "3M")
    assert HOST_ARRAY_BYTES() == 3 * 1024 * 1024
    for bad, message in (("lots", "cannot parse size"), ("1K", "below the minimum of 64K")):
        monkeypatch.setenv("RING_CEILING_BYTES", bad)
        with pytest.raises(ValueError, match=f"RING_CEILING_BYTES.*{message}"):
            HOST_ARRAY_BYTES()
        # The harness refuses it in one line before anything is measured or written.
        out = tmp_path / "r.csv"
        assert bench_main(["-b", "1K", "-e", "1K", "-n", "1", "--out", str(out)]) == 2
        assert message in capsys.readouterr().err and not out.exists()


def test_sysfs_sizes_parse():
    assert ceilings._sysfs_size("32768K\n") == 32 << 20
    assert ceilings._sysfs_size("1M") == 1 << 20
    assert ceilings._sysfs_size("512") == 512
    assert ceilings._sysfs_size("lots") is None


def test_drift_is_flagged_beyond_the_limit():
    start = {"copy_GBps": 10.0, "add_GBps": 20.0, "triad_GBps": 15.0}
    steady = {"copy_GBps": 10.5, "add_GBps": 19.0, "triad_GBps": 15.0}
    moved = {"copy_GBps": 10.0, "add_GBps": 12.0, "triad_GBps": 15.0}
    calm = ceilings.host_ceilings_document(start, steady)
    assert not calm["host_memory"]["drifted"]
    assert calm["add_GBps"] == 20.0 and calm["copy_GBps"] == 10.5  # the better of the two
    assert calm["host_memory"]["drift"] == pytest.approx(1 / 19)
    flagged = ceilings.host_ceilings_document(start, moved)
    assert flagged["host_memory"]["drifted"] and flagged["host_memory"]["drift"] == pytest.approx(
        8 / 12
    )


def test_measured_ceilings_use_every_kernel_and_enough_trials():
    measured = ceilings.measure_cpu_ceilings(np.float32, trials=2)
    assert measured["trials"] >= 5
    assert all(measured[f"{k}_GBps"] > 0 for k in ceilings.KERNELS)
    assert measured["array_bytes"] == 1 << 20 and measured["threads"] >= 1


# --- a run: interleaved series, samples, placement, drift in the JSON ----------------------


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "sweep.csv"
    patch = pytest.MonkeyPatch()
    patch.setattr(ceilings, "host_array_bytes", lambda: 1 << 20)
    # Module-scoped, so before conftest's own_wisdom: a wisdom file of its own, not ~/.cache.
    patch.setenv(store.WISDOM_ENV, str(out.parent / "wisdom.json"))
    for name in MPI_ENV:
        patch.delenv(name, raising=False)
    args = ["--backend", "cpu,numpy-direct", "--nodes", "2,4", "-b", "1K", "-e", "64K", "-f", "8"]
    try:
        assert bench_main([*args, "-n", "9", "-w", "1", "--pin", "1", "--out", str(out)]) == 0
    finally:
        patch.undo()
    return out


def test_samples_hold_every_timed_call(run_files):
    rows = read(run_files)
    samples = read(run_files.with_suffix(".samples.csv"))
    assert len(samples) == 9 * len(rows)
    for row in rows:
        key = (row["backend"], row["sync"], row["nodes"], row["bytes"])
        calls = [
            float(s["time_us"])
            for s in samples
            if (s["backend"], s["sync"], s["nodes"], s["bytes"]) == key
        ]
        assert sorted(int(s["call"]) for s in samples if (s["backend"], s["sync"], s["nodes"],
                      s["bytes"]) == key) == list(range(9))  # fmt: skip
        assert float(row["time_us"]) == pytest.approx(np.median(calls), rel=1e-5)
        assert float(row["time_us_min"]) == pytest.approx(min(calls), rel=1e-5)


def test_rows_record_threads_per_core_and_pinning(run_files):
    cores = len(os.sched_getaffinity(0))
    for row in read(run_files):
        workers = cores
        if row["backend"] == "cpu":  # the calling thread alone where the call ran inline
            workers = 1 if row["inline"] == "1" else int(row["nodes"])
        assert float(row["threads_per_core"]) == pytest.approx(workers / cores, rel=1e-5)
        assert row["pinned"] in ("true", "false")
    assert any(row["pinned"] == "true" for row in read(run_files))  # Linux allows it


def test_json_keeps_both_ceilings_and_flags_drift(run_files):
    document = json.loads(run_files.with_suffix(".json").read_text())
    host = document["ceilings"]["host_memory"]
    assert host["start"]["array_bytes"] == host["end"]["array_bytes"] == 1 << 20
    assert host["drifted"] == (host["drift"] > 0.15)
    assert bool(document["warnings"]) == host["drifted"]
    assert document["launch_command"] == document["command"]  # no launcher here


def test_bad_pin_value_is_one_line(tmp_path, capsys):
    assert bench_main(["--pin", "2", "-b", "1K", "-e", "1K", "--out", str(tmp_path / "x.csv")]) == 2
    assert "--pin must be 0 or 1" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_mpi_version_is_normalised():
    assert mpi_version("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4\x00") == (
        "Open MPI 4.1.4"
    )
    assert mpi_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to ...") == "Open MPI 4.1.4"
    assert mpi_version("MPICH Version:\t4.0.2\nMPICH Release date: ...") == "MPICH 4.0.2"
    assert mpi_version(None) is None


# --- comparisons that need separate launches ----------------------------------------------


@pytest.mark.slow
def test_alternated_launches_give_the_ratio_with_its_spread(tmp_path, monkeypatch):
    """The threaded ring against a peer launched apart: rounds alternate A B B A, the ratio is
    the median of the per-round ratios with their min and max, and the report labels it."""
    import shutil
    import subprocess
    import sys

    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not found (apt-get install openmpi-bin)")
    pytest.importorskip("mpi4py")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    env.update(SMALL_CEILINGS_ENV)
    out = tmp_path / "cmp" / "cpu_vs_mpi-allreduce_n2_float32.csv"
    command = [
        sys.executable, "-m", "ring.bench", "alternate", "--nodes", "2", "--rounds", "2",
        "--launcher", "mpirun --oversubscribe", "--out", str(out),
        "--", "-b", "1K", "-e", "16K", "-f", "16", "-n", "3", "-w", "1",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    order = [line.split(": ", 1)[1] for line in done.stdout.splitlines() if "# round" in line]
    assert ["mpirun" in line for line in order] == [False, True, True, False]  # A B B A
    launches = out.with_suffix(".launches")
    rows = read(out)
    assert [int(r["bytes"]) for r in rows] == [1024, 16384]
    for row in rows:
        ratios = []
        for r in range(2):
            ours = {x["bytes"]: float(x["time_us"]) for x in read(launches / f"ours_round{r}.csv")}
            peer = {x["bytes"]: float(x["time_us"]) for x in read(launches / f"peer_round{r}.csv")}
            ratios.append(peer[row["bytes"]] / ours[row["bytes"]])
        assert float(row["ratio"]) == pytest.approx(np.median(ratios), rel=1e-5)
        assert float(row["ratio_min"]) == pytest.approx(min(ratios), rel=1e-5)
        assert float(row["ratio_max"]) == pytest.approx(max(ratios), rel=1e-5)
    sweep = tmp_path / "cpu" / "sweep.csv"
    assert bench_main(["--backend", "cpu,numpy-direct", "-b", "1K", "-e", "16K", "-f", "16",
                       "-n", "3", "--out", str(sweep)]) == 0  # fmt: skip
    result = build_report(
        [sweep], figures_dir=tmp_path / "f", out_dir=tmp_path / "r", alternated=[out]
    )
    text = result.appendix.read_text()
    section = text.split("## The threaded ring against MPI_Allreduce, in alternated launches")[1]
    rows = [line for line in section.split("\n## ")[0].splitlines() if line.startswith("| cpu")]
    assert len(rows) == 2 and all("| 2 |" in row for row in rows)


# --- figures --------------------------------------------------------------------------------


@pytest.mark.parametrize(("low", "high"), [(10, 28), (10, 30), (0, 6), (12, 12)])
def test_size_axis_is_labelled_at_both_ends_of_the_sweep(low, high):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ring.report.draw.drawing import bytes_axis

    fig, ax = plt.subplots()
    bytes_axis(ax, [2**k for k in range(low, high + 1, 3)] + [2**high])
    ticks = [round(t) for t in ax.xaxis.get_major_locator()()]
    plt.close(fig)
    assert ticks[0] == 2**low and ticks[-1] == 2**high
    assert len(ticks) <= 8 and ticks == sorted(set(ticks))


# --- the profile qualified ------------------------------------------------------------------


def test_profile_phases_and_overhead_are_explained_from_its_numbers(run_files, tmp_path):
    import statistics

    from report_helpers import run_tables

    from ring.report.derive.model import ReportModel
    from ring.report.load import load_inputs
    from ring.report.words.fmt import format_number
    from ring.report.words.profile_notes import inputs_row, overhead_sentences, phase_sentences

    profile = run_tables(tmp_path / "profiles" / "cpu")
    size, nodes, copy, add = 64 << 20, 3, 20.0, 30.0
    (profile / "bench.json").write_text(
        json.dumps(
            {
                "command": ["python", "-m", "ring.bench", "--nodes", "3"],
                "start_time": "2026-01-01T00:00:00Z",
                "end_time": "2026-01-01T00:00:09Z",
                "config": {"sizes": [size], "nodes": [nodes]},
                "ceilings": {"copy_GBps": copy, "add_GBps": add, "triad_GBps": 25.0},
            }
        )
    )
    (profile / "overhead.json").write_text(
        json.dumps(
            {
                "ratio": 1.566,
                "target_ratio": 1.1,
                "repeats": 3,
                "size": "64M",
                "nodes": 4,
                "nsys": "2022.4",
            }
        )
    )
    model = ReportModel(load_inputs([run_files], profiles=[profile]))
    steps = read(profile / "tables" / "nvtx_ranges.csv")

    def median_us(phase):
        by_step: dict[str, list[float]] = {}
        for r in steps:
            if r["kind"] == "step" and r["phase"] == phase:
                by_step.setdefault(r["step"], []).append(float(r["median_ns"]))
        return statistics.median(statistics.median(v) for v in by_step.values()) / 1e3

    (sentence,) = phase_sentences(model)
    chunk = size // nodes
    rs_model = 3 * chunk / add / 1e3
    ag_model = ceilings.copy_traffic_bytes(chunk) / copy / 1e3
    for value in (median_us("all_gather"), median_us("reduce_scatter"), ag_model, rs_model):
        assert f" {format_number(value)} " in sentence, (value, sentence)
    (cost,) = overhead_sentences(model)
    assert "1.57×" in cost and "above the 1.10× target" in cost
    assert "(3 alternating runs of 64M at N = 4," in cost
    # config/ci.yaml's single pair (nsys.overhead_repeats: 1) reads as one.
    overhead = json.loads((profile / "overhead.json").read_text())
    (profile / "overhead.json").write_text(json.dumps({**overhead, "repeats": 1}))
    (cost,) = overhead_sentences(model)
    assert "(one plain and one profiled run of 64M at N = 4," in cost
    row = inputs_row(model.inputs.profiles[0])
    assert row[4] == "nsys profile … -- python -m ring.bench --nodes 3"
    assert row[5].startswith("2026-01-01T00:00:00Z") and "copy_GBps 20" in row[6]
    assert "profiler overhead 1.57×" in row[3]
