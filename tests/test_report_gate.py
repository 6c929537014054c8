"""The quality gate and the first screen: disturbed runs feed no finding, and the findings
of a quiet run name an algorithm, a size range, a same-run ratio with its interval and a
reason.

The fixture is the committed 2-core EPYC sweep (``results/reference/amd-epyc-2core``),
copied as it is (the control) and disturbed four ways, each as its own run: ceilings that
drifted during the run, a series above its run's memory ceiling beyond the caches, more
workers than cores, and a second run of the same configuration 1.5× slower.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from report_helpers import rehash

from ring.report import ReportModel, build_report, load_inputs
from ring.report.drawing import MAX_SERIES, SERIES_PER_PANEL
from ring.report.figures import FIGURES

ROOT = Path(__file__).resolve().parent.parent
EPYC = ROOT / "results" / "reference" / "amd-epyc-2core"
H200 = ROOT / "results" / "reference" / "nvidia-h200"


def copy_run(folder: Path, name: str, source: str = "cpu_sweep") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for suffix in (".csv", ".json"):
        shutil.copy(EPYC / f"{source}{suffix}", folder / f"{name}{suffix}")
    return folder / f"{name}.csv"


def edit_json(csv_path: Path, edit) -> None:
    path = csv_path.with_suffix(".json")
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document, indent=2) + "\n")


def slow_down(csv_path: Path, backend: str, factor: float) -> None:
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if row["backend"] == backend:
            for column in ("time_us", "time_us_min", "time_us_p25", "time_us_p75", "time_us_max"):
                row[column] = repr(float(row[column]) * factor)
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    rehash(csv_path)


def drifted(document: dict) -> None:
    document["ceilings"]["host_memory"] = {"drift": 0.40, "drift_limit": 0.15}


def above_ceiling(document: dict) -> None:
    # A ceiling far below what the series moved, with a cache small enough that the
    # largest sizes are beyond it: the series "beat" memory.
    document["ceilings"].update(copy_GBps=1.0, add_GBps=1.0)
    document["ceilings"]["host_memory"] = {"llc_bytes": 1 << 20}


def one_core(document: dict) -> None:
    document["environment"].update(cores=1, usable_cores=1)


DISTURBED = ("drifted", "above_ceiling", "oversubscribed", "spread_first", "spread_second")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("gate")
    made = {
        "control": copy_run(folder, "control"),
        "control_mpi": copy_run(folder, "control_mpi", "mpi_sweep"),
    }
    for name, edit in (
        ("drifted", drifted),
        ("above_ceiling", above_ceiling),
        ("oversubscribed", one_core),
    ):
        made[name] = copy_run(folder / name, name)
        edit_json(made[name], edit)
    # The same configuration twice on this machine, the second 1.5x slower for numpy-direct.
    made["spread_first"] = copy_run(folder / "spread", "spread_first")
    made["spread_second"] = copy_run(folder / "spread", "spread_second")
    slow_down(made["spread_second"], "numpy-direct", 1.5)
    return made


def model_of(*paths: Path) -> ReportModel:
    return ReportModel(load_inputs(list(paths)))


def test_the_control_has_findings_that_say_what_to_do_and_why(runs):
    model = model_of(runs["control"], runs["control_mpi"])
    # N = 4 on 2 cores is oversubscribed: nothing at N = 4 is a finding.
    # (mpi-allreduce N = 4 ran in both runs, and differs by more than 20 % between them.)
    assert set(model.gate["rule"]) == {"oversubscribed", "spread"}
    assert set(model.gate["nodes"]) == {4}
    findings = model.main_findings
    assert 4 <= len(findings) <= 6
    size = r"[\d,]+ [KMG]?i?B"
    for sentence in findings:
        # A regime: backend, N and a size range, then the action.
        assert re.match(rf"\*\*(cpu|mpi), N = 2, {size}–{size}: use ", sentence), sentence
        # Which algorithm of ours, by name.
        assert "ring" in sentence
        # A same-run ratio with its interval.
        assert re.search(r"[\d.]+×–[\d.]+× (faster|as long)", sentence), sentence
        assert re.search(r"(95 % CI|IQR band) [\d.]+×–[\d.]+×", sentence), sentence
        assert re.search(r"run control(_mpi)?\)", sentence), sentence
        # And why.
        assert re.search(r"Why: (latency|bandwidth)-bound", sentence), sentence
        assert "N = 4" not in sentence


@pytest.mark.parametrize("name", ["drifted", "above_ceiling", "oversubscribed"])
def test_a_disturbed_run_feeds_no_finding(runs, name):
    model = model_of(runs[name])
    rule = {"drifted": "drift", "above_ceiling": "above ceiling"}.get(name, name)
    assert rule in set(model.gate["rule"]), model.gate
    assert model.main_findings == []
    # Its points stay in the tables, flagged.
    assert (model.regime_points["gate"].str.contains(rule)).all() or rule == "above ceiling"


def test_run_to_run_spread_sets_both_runs_aside(runs):
    model = model_of(runs["spread_first"], runs["spread_second"])
    spread = model.gate[model.gate["rule"] == "spread"]
    assert set(spread["run"]) == {"spread_first", "spread_second"}
    assert set(spread["backend"]) == {"numpy-direct"}
    assert model.main_findings == []


def test_disturbed_runs_beside_quiet_ones(runs):
    """All together: the rules find each disturbed run, and no finding quotes one."""
    model = model_of(*runs.values())
    aside = model.gate
    for name, rule in (
        ("drifted", "drift"),
        ("above_ceiling", "above ceiling"),
        ("oversubscribed", "oversubscribed"),
        ("spread_second", "spread"),
    ):
        assert rule in set(aside.loc[aside["run"] == name, "rule"]), (name, aside)
    findings = model.main_findings
    assert findings
    for sentence in findings:
        assert not any(f"run {name})" in sentence for name in DISTURBED), sentence


def with_algorithms(csv_path: Path, factor: float) -> None:
    """The run as an algorithm run: beside its plain ring, direct by slices at ``factor``
    times the ring's pairwise time, and reduce-broadcast by nodes at twice it."""
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    added = []
    for row in rows:
        if row["backend"] == "cpu" and row["sync"] == "pairwise":
            for algorithm, executor, scale in (
                ("direct", "slices", factor),
                ("reduce-broadcast", "nodes", 2.0),
            ):
                other = dict(row, algorithm=algorithm, executor=executor)
                for column in ("time_us", "time_us_min", "time_us_p25", "time_us_p75"):
                    other[column] = repr(float(row[column]) * scale)
                other["time_us_max"] = other["time_us_p75"]
                added.append(other)
    with csv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows + added)
    rehash(csv_path)


def test_the_run_that_measured_the_most_of_ours_speaks(runs, tmp_path):
    """A ring-only sweep and an algorithm run of one backend and N both pass the gate: the
    findings there are the algorithm run's, whose fastest of ours is not the plain ring."""
    algorithms = copy_run(tmp_path / "algorithms", "algorithms")
    with_algorithms(algorithms, 0.01)  # far faster than every peer at every size
    model = model_of(runs["control"], runs["control_mpi"], algorithms)
    cpu_n2 = [f for f in model.main_findings if f.startswith("**cpu, N = 2")]
    assert cpu_n2, model.main_findings
    for sentence in cpu_n2:
        assert "run algorithms)" in sentence, sentence
        assert "use our `cpu pairwise direct (slices)`" in sentence, sentence
    # The mpi findings, of the control's own runs, stay.
    assert any("run control_mpi)" in f for f in model.main_findings)
    alone = model_of(runs["control"], runs["control_mpi"])
    assert any("run control)" in f for f in alone.main_findings if "cpu, N = 2" in f)


@pytest.fixture(scope="module")
def reference_report(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("gate_report")
    return build_report(
        [runs["control"], runs["control_mpi"], runs["drifted"], runs["oversubscribed"]],
        references=[H200],
        figures_dir=out / "figures",
        out_dir=out / "report",
    )


@pytest.mark.slow  # builds a whole report from the references
def test_report_is_short_and_opens_with_the_findings(reference_report):
    text = reference_report.markdown.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 250, len(lines)
    sections = [line for line in lines if line.startswith("## ")]
    assert sections[0] == "## What we found"
    assert "## Quality gate" in sections and "## The original study beside ours" in sections
    found = text.split("## What we found")[1].split("\n## ")[0]
    assert 4 <= found.count("\n- **") <= 6
    # The gate says what it set aside and why.
    gate = text.split("## Quality gate")[1].split("\n## ")[0]
    assert "| drift | drifted | every backend, every N | every size |" in gate, gate
    assert "| oversubscribed | oversubscribed | cpu, N = 2 | every size |" in gate
    # The original study's published numbers, as published, beside ours with the machine.
    original = text.split("## The original study beside ours")[1].split("\n## ")[0]
    assert "| 331.7 |" in original and "| 95 |" in original and "| 49 |" in original
    assert "nvidia-h200" in original
    # Every figure drawn is in the main report; the appendix is linked.
    for name in reference_report.drawn:
        assert f"{name}.png" in text
    assert "(appendix.md)" in text
    assert reference_report.appendix.is_file()


@pytest.mark.slow  # the same report
def test_no_panel_holds_more_than_six_series(reference_report):
    for name in reference_report.drawn:
        assert max(SERIES_PER_PANEL[name], default=0) <= MAX_SERIES, (name, SERIES_PER_PANEL)


def test_only_a_figure_that_says_so_pairs_machines():
    pairing = [spec for spec in FIGURES if "machines" in spec.question.lower()]
    assert [spec.name for spec in pairing] == ["gpu_vs_cpu_speedup"]
