"""The figures and the generated report, built from real harness output.

The harness (``python -m ring.bench``) runs once per session on tiny sizes, in the layout the
workflow writes (one file per backend and N); the profile tables come from the real Nsight
Systems output kept in ``tests/fixtures/nsys/cpu2022`` through ``python -m ring.nsys``.
Every headline number is checked against a value computed from the same CSV with the
``csv`` module (``report_helpers``), independently of the report's pandas code.  The
session's harness run and report are ``conftest.py``'s fixtures; the report's bad input
and its page in a browser have modules of their own.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from report_helpers import (
    ROOT,
    THREAD_BACKENDS,
    close,
    csv_rows,
    label,
    md_table,
    rehash,
    run_bench,
    run_report,
    size,
    sweep_csvs,
    times,
)

from ring.report import FIGURES, build_report
from ring.report.fmt import format_bytes

# Slow (tests/tiers.py): the harness and the report run as a whole, in subprocesses.
pytestmark = pytest.mark.slow

# --- the report from real results -------------------------------------------------------


def test_figures_drawn_and_absent_ones_listed(built, markdown, appendix):
    drawn = set(built.drawn)
    assert drawn == {
        "time_vs_size",
        "algorithms_cpu",
        "bandwidth_vs_size",
        "ring_vs_peers",
        "scaling_nodes",
        "sync_barrier_vs_pairwise",
        "profile_steps",
        "cost_model",  # from the committed default fits: the run made none
    }
    assert set(built.not_drawn) == {
        "algorithms_mpi",
        "algorithms_gpu",
        "gpu_vs_cpu_speedup",
        "kernel_bandwidth",
    }
    figures_dir = built.figures[0].png.parent
    for name in drawn:
        assert (figures_dir / f"{name}.png").stat().st_size > 10_000
        assert (figures_dir / f"{name}.svg").read_text().lstrip().startswith("<?xml")
    for name in built.not_drawn:
        assert not (figures_dir / f"{name}.png").exists()
        assert f"`{name}`" in appendix.split("## Not measured")[1]
    for spec in FIGURES:
        if spec.name in drawn:
            assert spec.caption in markdown


def test_busbw_at_largest_size_matches_csv(results, appendix):
    rows = csv_rows(results)
    table = md_table(appendix, "Bandwidth at the largest size, per backend and N")
    expected = {}
    for row in rows:
        key = (label(row), row["nodes"])
        if key not in expected or row["bytes"] > expected[key]["bytes"]:
            expected[key] = row
    assert {(r["series"], int(r["N"])) for r in table} == set(expected)
    for shown in table:
        row = expected[(shown["series"], int(shown["N"]))]
        assert size(shown["size"]) == row["bytes"]
        assert close(shown["busbw (GB/s)"], row["busbw_GBps"])
        assert close(shown["traffic (GB/s)"], row["traffic_GBps"])
        assert close(shown["time (µs)"], row["time_us"])


def test_speedups_match_csv(results, appendix):
    rows = csv_rows(results)
    checked = 0
    pairs = [("cpu ring: pairwise over barrier synchronisation", "cpu pairwise", "cpu barrier")]
    pairs += [
        ("cpu ring over its peers", ours, peer)
        for peer in THREAD_BACKENDS
        for ours in ("cpu pairwise", "cpu barrier")
    ]
    for title, fast, slow in pairs:
        for shown in md_table(appendix, title):
            if (shown["A"], shown["B"]) != (fast, slow):
                continue
            nodes = int(shown["N"])
            t_fast, t_slow = times(rows, fast, nodes), times(rows, slow, nodes)
            speedup = {size_: t_slow[size_] / t_fast[size_] for size_ in t_fast}
            best = max(speedup, key=speedup.get)
            worst = min(speedup, key=speedup.get)
            assert close(shown["largest speedup of A"], speedup[best])
            assert size(shown["at"]) == best
            assert close(shown["smallest speedup of A"], speedup[worst])
            assert size(shown["at#2"]) == worst
            largest = max(speedup)
            ratio, where = shown["at the largest size"].split(" (")
            assert close(ratio, speedup[largest]) and size(where.rstrip(")")) == largest
            checked += 1
    assert checked == 2 * len(pairs)  # every pair at N = 2 and N = 4


def test_ceiling_fraction_matches_json(results, appendix):
    rows = csv_rows(results)
    table = md_table(appendix, "Fraction of each ceiling reached")
    assert table
    for shown in table:
        run = next(
            r["run"] for r in rows if label(r) == shown["series"] and r["nodes"] == int(shown["N"])
        )
        meta = json.loads((results / "cpu" / f"{run}.json").read_text())
        kernels = {k: meta["ceilings"][k] for k in ("copy_GBps", "add_GBps", "triad_GBps")}
        # A host series meets its run's fastest memory kernel, and only that one.
        assert shown["ceiling"] == max(kernels, key=kernels.get)
        ceiling = meta["ceilings"][shown["ceiling"]]
        mine = [r for r in rows if r["run"] == run and label(r) == shown["series"]]
        last = max(mine, key=lambda r: r["bytes"])
        assert shown["compared"] == "traffic_GBps"
        assert close(shown["ceiling (GB/s)"], ceiling)
        assert close(shown["fraction"], 100 * last["traffic_GBps"] / ceiling)
    assert len(table) == len({(r["series"], r["N"]) for r in table})


def test_scaling_matches_csv(results, appendix):
    rows = csv_rows(results)
    table = md_table(appendix, "Node-count scaling at the largest common size")
    assert {r["series"] for r in table} == {"cpu pairwise", "cpu barrier", *THREAD_BACKENDS}
    for shown in table:
        t2, t4 = times(rows, shown["series"], 2), times(rows, shown["series"], 4)
        largest = max(set(t2) & set(t4))
        assert shown["N ratio"] == "4 / 2" and size(shown["size"]) == largest
        assert close(shown["time ratio"], t4[largest] / t2[largest])
        assert close(shown["busbw factor ratio"], (2 * 3 / 4) / (2 * 1 / 2))


def test_wait_share_matches_profile_table(results, appendix):
    with (results / "profiles" / "cpu" / "tables" / "nvtx_ranges.csv").open(newline="") as f:
        steps = [r for r in csv.DictReader(f) if r["kind"] == "step"]
    table = md_table(appendix, "Share of ring-step time spent waiting (Nsight Systems)")
    assert [r["phase"] for r in table] == ["reduce_scatter", "all_gather"]
    for shown in table:
        phase = [r for r in steps if r["phase"] == shown["phase"]]
        wait = sum(int(r["wait_ns"]) for r in phase)
        total = sum(int(r["total_ns"]) for r in phase)
        assert close(shown["share"], 100 * wait / total)
        assert close(shown["time in steps (µs)"], total / 1e3)
    # Raw profile tables are folded away below the findings.
    assert "<details><summary>cpu: nvtx_ranges</summary>" in appendix


def test_not_measured_says_what_is_missing(results, built, appendix):
    section = appendix.split("## Not measured")[1].split("## Environment")[0]
    meta = json.loads(next((results / "cpu").glob("*.json")).read_text())
    gpu_rows = [line for line in section.splitlines() if line.startswith("| GPU ring")]
    assert len(gpu_rows) == 1
    assert "`snakemake --cores 8 gpu`" in gpu_rows[0]
    html = (
        built.appendix.with_name("appendix.html")
        .read_text(encoding="utf-8")
        .split('id="not-measured"')[1]
    )
    assert "<code>snakemake --cores 8 gpu</code>" in html
    if not meta["environment"]["gpus"]:
        no_gpu = f"no GPU on {meta['environment']['host']}"
        assert no_gpu in gpu_rows[0]
        assert f"{no_gpu} (<code>environment.gpus</code> is empty" in html
    for what in ("NCCL allreduce", "MPI_Allreduce through mpi4py", "the ring over MPI ranks"):
        assert f"| {what} |" in section
    assert "Nsight Systems profile of the CPU ring" not in section  # it was given


def test_environment_and_inputs_come_from_the_json(results, appendix):
    metas = [json.loads(p.read_text()) for p in sorted((results / "cpu").glob("*.json"))]
    section = appendix.split("## Environment")[1]
    for meta in metas:
        assert meta["environment"]["host"] in section
        assert meta["git_commit"] in section
        assert " ".join(meta["command"]) in section


def test_caveats_from_the_data(appendix):
    caveats = appendix.split("## Caveats")[1].split("## Cost model")[0]
    threads = (
        "cpu, numpy-direct and seed-cpp"
        if "seed-cpp" in THREAD_BACKENDS
        else ("cpu and numpy-direct")
    )
    assert f"{threads} run(s) as threads sharing one memory" in caveats
    # The ring and its peers share a run at each N: no speedup pairs two runs.
    assert "pair series from different runs" not in caveats
    # N = 4 threads on fewer than 4 cores is marked, N = 2 only with fewer than 2; the cpu
    # backend ran every call of this sweep (at most 64 KiB) inline, on the calling thread.
    cores = len(os.sched_getaffinity(0))
    # That caveat's own text only: the next one starts with its bold title.
    marked = caveats.split("**More nodes than cores.**")[-1].split("**")[0]
    assert "cpu pairwise N=4" not in marked
    if "seed-cpp" in THREAD_BACKENDS:
        assert ("seed-cpp N=4" in marked) == (cores < 4)
    assert "Wrong results" not in caveats


def test_html_is_self_contained(built):
    html = built.html.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", html)
    assert "<script" not in html and "<link" not in html
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)"', html)
    drawn = [f for f in built.figures if f.drawn]
    assert len(images) == len(drawn)
    for data, figure in zip(images, drawn, strict=True):
        assert base64.b64decode(data) == figure.png.read_bytes()


def test_cli_builds_and_reports(results, tmp_path):
    figures, out = str(tmp_path / "figures"), str(tmp_path / "report")
    done = run_report("--results", str(results), "--figures", figures, "--out", out)
    assert done.returncode == 0, done.stderr
    absent = "algorithms_mpi, algorithms_gpu, gpu_vs_cpu_speedup, kernel_bandwidth"
    assert f"not drawn (data absent): {absent}" in done.stdout
    assert (tmp_path / "report" / "index.html").is_file()


def test_import_does_not_load_plotting():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, ring.report; "
            "print(sorted(m for m in ('seaborn', 'matplotlib', 'jinja2') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# --- what changes with the inputs -------------------------------------------------------


def test_stale_figure_is_removed(results, built, tmp_path):
    """A figure of an earlier build must not pass for one of this build."""
    figures = tmp_path / "figures"
    shutil.copytree(built.figures[0].png.parent, figures)
    assert (figures / "sync_barrier_vs_pairwise.png").exists()
    pairwise = run_bench(
        tmp_path / "cpu" / "cpu_n2_float32.csv",
        "--backend",
        "cpu",
        "--nodes",
        "2",
        "--sync",
        "pairwise",
    )
    result = build_report([pairwise], figures_dir=figures, out_dir=tmp_path / "report")
    assert "sync_barrier_vs_pairwise" in result.not_drawn
    assert not (figures / "sync_barrier_vs_pairwise.png").exists()
    assert not (figures / "sync_barrier_vs_pairwise.svg").exists()
    text = result.appendix.read_text()
    assert "the cpu ring was not measured with both sync modes (found: ['pairwise'])" in text
    assert "| CPU ring (threads), barrier after every step |" in text


def test_nul_padded_environment_strings_are_cleaned(tmp_path):
    """Open MPI pads its library version with NUL bytes; results written before the
    harness stripped them must still give a text report."""
    sweep = run_bench(tmp_path / "cpu" / "cpu_n2_float32.csv", "--backend", "cpu", "--nodes", "2")
    meta_path = sweep.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["environment"]["mpi_library"] = "Open MPI v4.1.4, May 26, 2022\x00\x00"
    meta_path.write_text(json.dumps(meta))
    result = build_report([sweep], figures_dir=tmp_path / "figures", out_dir=tmp_path / "report")
    for path in (result.appendix, result.appendix.with_name("appendix.html")):
        assert b"\x00" not in path.read_bytes()
    # Normalised to name and version, as every probe of the same library reads.
    assert "| Open MPI 4.1.4 |" in result.appendix.read_text()


def test_wrong_rows_repeated_runs_and_workflow_record(results, tmp_path):
    """Wrong elements become a caveat; a series measured twice at one N keeps both runs apart;
    the workflow's record of what it left out is shown as it says."""
    data = tmp_path / "cpu"
    shutil.copytree(results / "cpu", data)
    with (data / "sweep_n2_float32.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows[1]["wrong"] = "7"  # as the harness writes a failed point
    with (data / "sweep_n2_float32.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    rehash(data / "sweep_n2_float32.csv")
    again = run_bench(
        tmp_path / "rerun" / "numpy-direct_n2_float32.csv",
        "--backend",
        "numpy-direct",
        "--nodes",
        "2",
    )
    record = tmp_path / "not_measured.json"
    record.write_text(
        json.dumps(
            [
                {
                    "what": "MPI sweeps (mpi, mpi-allreduce)",
                    "why": "mpirun not found on PATH",
                    "where": "apt-get install openmpi-bin, then",
                    "target": "mpi",
                    "how": "apt-get install openmpi-bin, then: snakemake --cores 8 mpi",
                }
            ]
        )
    )
    sweeps = [*sweep_csvs(data), again]
    result = build_report(
        sweeps, figures_dir=tmp_path / "f", out_dir=tmp_path / "r", not_measured=record
    )
    text = result.appendix.read_text()
    caveats = text.split("## Caveats")[1].split("## Cost model")[0]
    wrong = rows[1]
    assert "**Wrong results.** 1 point(s) failed validation" in caveats
    assert f"{label(wrong)} N=2 at {format_bytes(int(wrong['bytes']))}: 7 wrong" in caveats
    bandwidth = md_table(text, "Bandwidth at the largest size, per backend and N")
    series = {r["series"] for r in bandwidth}
    assert {
        "numpy-direct [sweep_n2_float32]",
        "numpy-direct [numpy-direct_n2_float32]",
    } <= series
    section = text.split("## Not measured")[1]
    assert (
        "| MPI sweeps (mpi, mpi-allreduce) | mpirun not found on PATH | "
        "apt-get install openmpi-bin, then: `snakemake --cores 8 mpi` |" in section
    )
    # The record covers the mpi target: the report adds no second line for it.
    assert "| the ring over MPI ranks |" not in section


def test_main_report_is_short_and_panels_are_readable(built, markdown):
    """The page a reader reads first keeps to 250 lines of Markdown, leads with the findings
    and links the appendix; no figure crowds more than 6 series into a panel."""
    from ring.report.drawing import MAX_SERIES, SERIES_PER_PANEL

    assert len(markdown.splitlines()) <= 250
    assert next(line for line in markdown.splitlines() if line.startswith("## ")) == (
        "## What we found"
    )
    assert "(appendix.md)" in markdown and built.appendix.is_file()
    for name in built.drawn:
        assert max(SERIES_PER_PANEL[name], default=0) <= MAX_SERIES, name
