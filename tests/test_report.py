"""The figures and the generated report, built from real harness output.

The harness (``python -m ring.bench``) runs once per session on tiny sizes, in the layout the
workflow writes (one file per backend and N); the profile tables come from the real Nsight
Systems output kept in ``tests/fixtures/nsys/cpu2022`` through ``python -m ring.nsys``.
Every headline number is checked against a value this file computes from the same CSV
with the ``csv`` module, independently of the report's pandas code.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_bench import SMALL_CEILINGS_ENV

from ring.bench.seed_cpp.build import compiler_problem
from ring.report import FIGURES, ReportInputError, build_report, collect_inputs
from ring.report.fmt import format_bytes, format_number

ROOT = Path(__file__).resolve().parent.parent
NSYS_FIXTURE = ROOT / "tests" / "fixtures" / "nsys" / "cpu2022"
ARTIFACTS = Path(os.environ.get("RING_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
BENCH = ["-b", "1K", "-e", "64K", "-f", "4", "-n", "3", "-w", "1", "--seed", "1"]
# The cpu sweep's backends as the workflow runs them (seed-cpp only where it can be built).
THREAD_BACKENDS = ("numpy-direct",) + (("seed-cpp",) if compiler_problem() is None else ())


def run_bench(out: Path, *args: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "ring.bench", *BENCH, *args, "--out", str(out)]
    env = {**os.environ, **SMALL_CEILINGS_ENV}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    return out


def run_tables(profile_dir: Path) -> Path:
    csvs = sorted(str(p) for p in NSYS_FIXTURE.glob("*.csv"))
    for command in (
        ["tables", "--out", str(profile_dir / "tables"), *csvs],
        ["summary", str(profile_dir / "tables"), "--out", str(profile_dir / "summary.md")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "ring.nsys", *command],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
    return profile_dir


@pytest.fixture(scope="session")
def results(tmp_path_factory) -> Path:
    """``results/`` as the workflow lays it out: cpu/sweep_n<N>_float32.csv (the ring and
    numpy-direct in one run, with its samples) + profile."""
    root = tmp_path_factory.mktemp("results")
    for nodes in (2, 4):
        run_bench(
            root / "cpu" / f"sweep_n{nodes}_float32.csv",
            "--backend",
            ",".join(["cpu", *THREAD_BACKENDS]),
            "--nodes",
            str(nodes),
            "--sync",
            "pairwise,barrier",
        )
    run_tables(root / "profiles" / "cpu")
    return root


@pytest.fixture(scope="session")
def built(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("built")
    chosen = collect_inputs(results=results)
    result = build_report(
        chosen["sweeps"],
        profiles=chosen["profiles"],
        figures_dir=out / "figures",
        out_dir=out / "report",
    )
    return result


@pytest.fixture(scope="session")
def markdown(built) -> str:
    return built.markdown.read_text(encoding="utf-8")


# --- reading the result files independently of the report --------------------------------


def sweep_csvs(folder: Path) -> list[Path]:
    """The result CSVs of a folder, without the per-call samples beside them."""
    return sorted(p for p in folder.glob("*.csv") if not p.name.endswith(".samples.csv"))


def csv_rows(results: Path) -> list[dict]:
    rows = []
    for path in sweep_csvs(results / "cpu"):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                row["run"] = path.stem
                for key in ("nodes", "bytes", "wrong"):
                    row[key] = int(row[key])
                for key in ("time_us", "busbw_GBps", "traffic_GBps", "algbw_GBps"):
                    row[key] = float(row[key])
                rows.append(row)
    return rows


def label(row: dict) -> str:
    return row["backend"] if row["sync"] == "none" else f"{row['backend']} {row['sync']}"


def rows_time(rows: list[dict], name: str, nodes: int, size_: int) -> float:
    return times(rows, name, nodes)[size_]


def times(rows: list[dict], name: str, nodes: int) -> dict[int, float]:
    return {r["bytes"]: r["time_us"] for r in rows if label(r) == name and r["nodes"] == nodes}


# --- reading the report ---------------------------------------------------------------


def md_table(text: str, title: str) -> list[dict]:
    """The Markdown table under ``### title`` as a list of {header: cell}."""
    lines = text.splitlines()
    start = lines.index(f"### {title}") + 1
    while not lines[start].startswith("|"):
        start += 1
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    header, body = table[0], table[2:]
    # A repeated header ("at") gets a suffix: "at", "at#2".
    header = [h if header[:i].count(h) == 0 else f"{h}#{header[:i].count(h) + 1}"
              for i, h in enumerate(header)]  # fmt: skip
    return [dict(zip(header, row, strict=True)) for row in body]


def number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("×%").strip())


def size(cell: str) -> int:
    value, unit = cell.split()
    scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]
    return int(value.replace(",", "")) * scale


def close(shown: str, value: float) -> bool:
    """``shown`` is ``value`` to three significant digits (the report's rounding)."""
    return math.isclose(number(shown), value, rel_tol=5.01e-3)


# --- the report from real results -------------------------------------------------------


def test_figures_drawn_and_absent_ones_listed(built, markdown):
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
        assert f"`{name}`" in markdown.split("## Not measured")[1]
    for spec in FIGURES:
        if spec.name in drawn:
            assert spec.caption in markdown


def test_busbw_at_largest_size_matches_csv(results, markdown):
    rows = csv_rows(results)
    table = md_table(markdown, "Bandwidth at the largest size, per backend and N")
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


def test_speedups_match_csv(results, markdown):
    rows = csv_rows(results)
    checked = 0
    pairs = [("cpu ring: pairwise over barrier synchronisation", "cpu pairwise", "cpu barrier")]
    pairs += [
        ("cpu ring over its peers", ours, peer)
        for peer in THREAD_BACKENDS
        for ours in ("cpu pairwise", "cpu barrier")
    ]
    for title, fast, slow in pairs:
        for shown in md_table(markdown, title):
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


def test_ceiling_fraction_matches_json(results, markdown):
    rows = csv_rows(results)
    table = md_table(markdown, "Fraction of each ceiling reached")
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


def test_scaling_matches_csv(results, markdown):
    rows = csv_rows(results)
    table = md_table(markdown, "Node-count scaling at the largest common size")
    assert {r["series"] for r in table} == {"cpu pairwise", "cpu barrier", *THREAD_BACKENDS}
    for shown in table:
        t2, t4 = times(rows, shown["series"], 2), times(rows, shown["series"], 4)
        largest = max(set(t2) & set(t4))
        assert shown["N ratio"] == "4 / 2" and size(shown["size"]) == largest
        assert close(shown["time ratio"], t4[largest] / t2[largest])
        assert close(shown["busbw factor ratio"], (2 * 3 / 4) / (2 * 1 / 2))


def test_wait_share_matches_profile_table(results, markdown):
    with (results / "profiles" / "cpu" / "tables" / "nvtx_ranges.csv").open(newline="") as f:
        steps = [r for r in csv.DictReader(f) if r["kind"] == "step"]
    table = md_table(markdown, "Share of ring-step time spent waiting (Nsight Systems)")
    assert [r["phase"] for r in table] == ["reduce_scatter", "all_gather"]
    for shown in table:
        phase = [r for r in steps if r["phase"] == shown["phase"]]
        wait = sum(int(r["wait_ns"]) for r in phase)
        total = sum(int(r["total_ns"]) for r in phase)
        assert close(shown["share"], 100 * wait / total)
        assert close(shown["time in steps (µs)"], total / 1e3)
    # Raw profile tables are folded away below the findings.
    assert "<details><summary>cpu: nvtx_ranges</summary>" in markdown


def test_not_measured_says_what_is_missing(results, built, markdown):
    section = markdown.split("## Not measured")[1].split("## Environment")[0]
    meta = json.loads(next((results / "cpu").glob("*.json")).read_text())
    gpu_rows = [line for line in section.splitlines() if line.startswith("| GPU ring")]
    assert len(gpu_rows) == 1
    assert "`snakemake --cores 8 gpu`" in gpu_rows[0]
    html = built.html.read_text(encoding="utf-8").split('id="not-measured"')[1]
    assert "<code>snakemake --cores 8 gpu</code>" in html
    if not meta["environment"]["gpus"]:
        no_gpu = f"no GPU on {meta['environment']['host']}"
        assert no_gpu in gpu_rows[0]
        assert f"{no_gpu} (<code>environment.gpus</code> is empty" in html
    for what in ("NCCL allreduce", "MPI_Allreduce through mpi4py", "the ring over MPI ranks"):
        assert f"| {what} |" in section
    assert "Nsight Systems profile of the CPU ring" not in section  # it was given


def test_environment_and_inputs_come_from_the_json(results, markdown):
    metas = [json.loads(p.read_text()) for p in sorted((results / "cpu").glob("*.json"))]
    section = markdown.split("## Environment")[1]
    for meta in metas:
        assert meta["environment"]["host"] in section
        assert meta["git_commit"] in section
        assert " ".join(meta["command"]) in section


def test_caveats_from_the_data(markdown):
    caveats = markdown.split("## Caveats")[1].split("## Figures")[0]
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
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ring.report",
            "--results",
            str(results),
            "--figures",
            str(tmp_path / "figures"),
            "--out",
            str(tmp_path / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
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
    text = result.markdown.read_text()
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
    for path in (result.markdown, result.html):
        assert b"\x00" not in path.read_bytes()
    # Normalised to name and version, as every probe of the same library reads.
    assert "| Open MPI 4.1.4 |" in result.markdown.read_text()


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
    text = result.markdown.read_text()
    caveats = text.split("## Caveats")[1].split("## Figures")[0]
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
    elif damage == "bad_bool":
        cells = lines[2].split(",")
        cells[lines[0].split(",").index("shared_devices")] = "maybe"
        path.write_text("\n".join([*lines[:2], ",".join(cells), *lines[3:]]))
    figures, report = existing_report(tmp_path)
    with pytest.raises(ReportInputError) as error:
        others = [p for p in sweep_csvs(path.parent) if p != path]
        build_report([*others, path], figures_dir=figures, out_dir=report)
    assert message in str(error.value)
    assert str(path.parent) in str(error.value)
    assert (figures / "time_vs_size.png").read_bytes() == b"earlier"
    assert (report / "index.html").read_text() == "earlier"
    assert sorted(p.name for p in report.iterdir()) == ["index.html"]


def test_cli_bad_input_exit_2_without_traceback(results, tmp_path):
    missing = tmp_path / "nowhere" / "cpu_n2_float32.csv"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ring.report",
            "--sweep",
            str(results / "cpu" / "sweep_n4_float32.csv"),
            "--sweep",
            str(missing),
            "--figures",
            str(tmp_path / "figures"),
            "--out",
            str(tmp_path / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"ring.report: {missing}: missing"
    assert not (tmp_path / "report").exists()


def test_no_sweep_at_all_is_an_error(tmp_path):
    (tmp_path / "results").mkdir()
    chosen = collect_inputs(results=tmp_path / "results")
    with pytest.raises(ReportInputError, match="no sweep result given"):
        build_report(chosen["sweeps"], figures_dir=tmp_path / "f", out_dir=tmp_path / "r")


def test_profile_without_tables_is_an_error(results, tmp_path):
    (tmp_path / "cpu").mkdir()
    with pytest.raises(ReportInputError, match=r"cpu/tables: missing"):
        build_report(
            sweep_csvs(results / "cpu"),
            profiles=[tmp_path / "cpu"],
            figures_dir=tmp_path / "f",
            out_dir=tmp_path / "r",
        )


def test_malformed_profile_table_names_it(results, tmp_path):
    profile = tmp_path / "cpu"
    shutil.copytree(results / "profiles" / "cpu", profile)
    table = profile / "tables" / "osrt.csv"
    table.write_text(table.read_text().replace("total_ns", "total_time", 1))
    with pytest.raises(ReportInputError, match=re.escape(str(table))):
        build_report(
            sweep_csvs(results / "cpu"),
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


# --- the page in a browser ----------------------------------------------------------------


def chromium() -> str:
    for name in (os.environ.get("RING_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.skip("headless Chromium not found (Debian: apt-get install -y chromium)")


def screenshot(browser: str, page: Path, out: Path, profile: Path, height: int):
    """The page as an RGB array, rendered by headless Chromium in a fresh profile."""
    import numpy as np
    from PIL import Image

    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--screenshot={out}",
        f"--window-size=1280,{height}",
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and out.is_file(), done.stderr[-2000:]
    with Image.open(out) as image:
        return np.asarray(image.convert("RGB")).astype(np.int16)


def bands_of(rows, gap: int = 30) -> list[list[int]]:
    """Runs of row indices, joined where they are at most ``gap`` rows apart."""
    bands: list[list[int]] = []
    for y in rows:
        if bands and y - bands[-1][1] <= gap:
            bands[-1][1] = int(y)
        else:
            bands.append([int(y), int(y)])
    return bands


def test_figures_render_in_chromium(built, tmp_path):
    """Screenshot the page, and again with every figure replaced by a white image of the
    same size: the rows that differ are where figures were painted, one band per figure."""
    import numpy as np
    from PIL import Image

    browser = chromium()
    html = built.html.read_text(encoding="utf-8")
    drawn = [f for f in built.figures if f.drawn]
    whites = []
    for figure in drawn:
        with Image.open(figure.png) as image:
            Image.new("RGB", image.size, "white").save(tmp_path / "white.png")
        whites.append(base64.b64encode((tmp_path / "white.png").read_bytes()).decode())
    stand_ins = iter(whites)
    blank_page = tmp_path / "blank.html"
    blank_page.write_text(
        re.sub(
            r"data:image/png;base64,[^\"]+",
            lambda _: f"data:image/png;base64,{next(stand_ins)}",
            html,
        )
    )
    height = 24000
    real = screenshot(browser, built.html, tmp_path / "page.png", tmp_path / "p1", height)
    blank = screenshot(browser, blank_page, tmp_path / "blank.png", tmp_path / "p2", height)

    inked = np.flatnonzero((real < 245).any(axis=(1, 2)))
    assert inked.size, "the page rendered nothing"
    bottom = int(inked[-1]) + 1
    assert bottom < height - 40, "the page is longer than the screenshot; raise its height"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    Image.fromarray(real[: bottom + 20].astype(np.uint8)).save(ARTIFACTS / "report_screenshot.png")

    differs = (np.abs(real - blank) > 24).any(axis=2)
    bands = bands_of(np.flatnonzero(differs.any(axis=1)))
    assert len(bands) == len(drawn), f"figure bands at rows {bands}"
    for (top, end), figure in zip(bands, drawn, strict=True):
        with Image.open(figure.png) as image:
            width, tall = image.size
        shown = end + 1 - top
        # The page scales a figure down to its column, never up; the PNG's white margin
        # does not differ from the white stand-in.
        assert shown <= tall + 2, (figure.spec.name, top, end)
        assert shown >= 0.6 * tall * min(1.0, 1100 / width), (figure.spec.name, top, end)
        painted = differs[top : end + 1].mean()
        assert painted > 0.01, (figure.spec.name, painted)


# --- GPU results: the harness's own gpu, nccl and kernel-bw code on the CUDA simulator ----


@pytest.fixture(scope="session")
def simulated_gpu(results, tmp_path_factory):
    """``results/`` plus gpu/nccl sweeps and a kernel-bw sweep from the harness run on the
    CUDA simulator of ``test_gpu_fakecuda`` (real files, simulated device times)."""
    from test_gpu_fakecuda import FakeCuda, fake_cupy

    import ring.bench.backends.gpu
    import ring.bench.backends.nccl
    import ring.bench.ceilings
    import ring.bench.gpu_ceilings as bench_gpu
    import ring.bench.kernel_bw as kernel_bw
    from ring.bench.__main__ import main as bench_main

    root = tmp_path_factory.mktemp("with_gpu")
    shutil.copytree(results / "cpu", root / "cpu")
    small = 64 << 10  # the simulator moves bytes with NumPy: keep its ceilings small
    patch = pytest.MonkeyPatch()
    for module in (bench_gpu, kernel_bw):
        patch.setattr(module, "ceiling_bytes", lambda max_bytes, itemsize: small)
    patch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: small)
    bench_gpu._ceiling_cache.clear()
    try:
        with fake_cupy(FakeCuda(4, seed=1)):
            for backend in ("gpu", "nccl"):
                for nodes in (2, 4):
                    out = root / "gpu" / f"{backend}_n{nodes}_float32.csv"
                    args = [*BENCH, "--backend", backend, "--nodes", str(nodes), "--out", str(out)]
                    assert bench_main(args) == 0
        with fake_cupy(FakeCuda(1, seed=2)):
            out = root / "gpu" / "kernel_bw_float32.csv"
            assert kernel_bw.main([*BENCH, "--out", str(out)]) == 0
    finally:
        patch.undo()
    return root


def test_gpu_results_on_the_simulator(simulated_gpu, tmp_path):
    chosen = collect_inputs(results=simulated_gpu)
    assert [p.name for p in chosen["kernel_bandwidth"]] == ["kernel_bw_float32.csv"]
    result = build_report(
        chosen["sweeps"],
        kernel_bandwidth=chosen["kernel_bandwidth"],
        figures_dir=tmp_path / "figures",
        out_dir=tmp_path / "report",
    )
    assert {"gpu_vs_cpu_speedup", "kernel_bandwidth"} <= set(result.drawn)
    text = result.markdown.read_text()

    rows = csv_rows(simulated_gpu)  # only cpu/: the CPU side of the comparison
    gpu = {}
    for path in sorted((simulated_gpu / "gpu").glob("gpu_n*.csv")):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                gpu[(int(row["nodes"]), int(row["bytes"]))] = float(row["time_us"])
    speedups = {}
    for row in rows:
        key = (row["nodes"], row["bytes"])
        if row["backend"] == "cpu" and key in gpu:
            speedups[(label(row), *key)] = row["time_us"] / gpu[key]
    (name, nodes, where), best = max(speedups.items(), key=lambda item: item[1])
    headline = re.search(r"\*\*Largest GPU/CPU speedup: ([\d.,]+×) at (.+?) per node", text)
    assert headline, text[:2000]
    assert close(headline.group(1), best) and size(headline.group(2)) == where
    line = next(line for line in text.splitlines() if line.startswith("**Largest GPU/CPU"))
    assert f"{name} N={nodes}: {format_number(rows_time(rows, name, nodes, where))} µs" in line
    table = md_table(text, "GPU ring over CPU ring (wall-clock time)")
    assert len(table) == 4  # gpu against cpu pairwise and barrier, at N = 2 and 4
    for shown in table:
        mine = {b: s for (n_, nodes_, b), s in speedups.items()
                if n_ == shown["B"] and nodes_ == int(shown["N"])}  # fmt: skip
        assert close(shown["largest speedup of A"], max(mine.values()))

    fractions = md_table(text, "Fraction of each ceiling reached")
    gpu_ceilings = {r["ceiling"] for r in fractions if r["series"].startswith("gpu")}
    assert "gpu_peer_GBps[0->1]" in gpu_ceilings and "gpu_copy_GBps[0]" in gpu_ceilings
    assert {r["compared"] for r in fractions if r["ceiling"].startswith("gpu_peer")} == {
        "busbw_GBps"
    }
    # NCCL's traffic is unknown to the harness: no traffic-based fraction is invented for it.
    assert not [r for r in fractions if r["series"] == "nccl" and r["compared"] == "traffic_GBps"]

    with (simulated_gpu / "gpu" / "kernel_bw_float32.csv").open(newline="") as handle:
        kernel = list(csv.DictReader(handle))
    table = md_table(text, "Reduction kernel against the device copy (one GPU)")
    assert [shown["kernel"] for shown in table] == ["ring", "ufunc"]  # ours, and CuPy's
    for shown in table:
        last = max(
            (r for r in kernel if r["kernel"] == shown["kernel"]), key=lambda r: int(r["bytes"])
        )
        assert close(shown["kernel (GB/s)"], float(last["kernel_GBps"]))
        assert close(
            shown["kernel / copy"], 100 * float(last["kernel_GBps"]) / float(last["copy_GBps"])
        )
    section = text.split("## Not measured")[1].split("## Environment")[0]
    assert "| GPU ring" not in section and "| NCCL allreduce |" not in section


def test_findings_lead_and_profile_tables_fold_in_chromium(built, tmp_path):
    """In the rendered page the findings are painted first, above the headline tables, and
    the raw profile tables stay folded until opened."""
    import numpy as np

    browser = chromium()
    html = built.html.read_text(encoding="utf-8")
    height = 24000

    def shot(name: str, text: str):
        page = tmp_path / f"{name}.html"
        page.write_text(text, encoding="utf-8")
        return screenshot(browser, page, tmp_path / f"{name}.png", tmp_path / f"p-{name}", height)

    def changed_rows(a, b):
        return np.flatnonzero((np.abs(a - b) > 24).any(axis=(1, 2)))

    real = shot("real", html)
    findings = re.search(r'<ul class="findings">.*?</ul>', html, flags=re.S)
    assert findings and findings.group(0).count("<li>") >= 3
    without = shot("without", html.replace(findings.group(0), '<ul class="findings"></ul>'))
    headline = shot("headline", html.replace('<h2 id="headline">', '<h2 id="headline" hidden>'))
    rows = changed_rows(real, without)
    heading = changed_rows(real, headline)[0]
    # The findings are painted first, above the headline numbers' heading, near the top.
    assert rows.size > 40
    assert rows[0] < heading
    assert rows[0] < 500, "the findings are not near the top of the page"

    folded = html.count('<details class="profile-table">')
    assert folded == len(re.findall(r"<summary>", html)) and folded >= 1
    opened = shot("opened", html.replace('<details class="profile-table">', "<details open>"))
    inked = [np.flatnonzero((img < 245).any(axis=(1, 2)))[-1] for img in (real, opened)]
    # Opening them adds at least a table row per folded table to the page.
    assert inked[1] - inked[0] > 20 * folded
    # Nothing above the profiles changes: the findings and the headline tables stay put.
    assert changed_rows(real, opened)[0] > heading
