"""The report drawing committed reference results measured on other machines.

The H200 run (``results/reference/nvidia-h200``) and the 2-core CPU run
(``results/reference/amd-epyc-2core``) are real harness output from two machines; the
GPU-vs-CPU speedup between them is recomputed here with the ``csv`` module, independently of
the report's pandas code, and every series they contribute must name its machine.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
from report_helpers import close, md_table, run_report, size

from ring.report import ReportInputError, build_report, collect_inputs
from ring.report.inputs import discover_reference, load_inputs
from ring.report.intervals import samples_of

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "results" / "reference" / "nvidia-h200"
EPYC = ROOT / "results" / "reference" / "amd-epyc-2core"


def read(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A local CPU-only run (a copy of the EPYC sweep) plus the H200 reference."""
    tmp = tmp_path_factory.mktemp("reference")
    local = tmp / "results" / "cpu"
    local.mkdir(parents=True)
    for suffix in (".csv", ".json"):
        shutil.copy(EPYC / f"cpu_sweep{suffix}", local / f"cpu_sweep{suffix}")
    built = build_report(
        [local / "cpu_sweep.csv"],
        references=[H200, EPYC],
        figures_dir=tmp / "figures",
        out_dir=tmp / "report",
    )
    return built, built.appendix.read_text(encoding="utf-8")


@pytest.mark.slow
def test_gpu_vs_cpu_headline_across_two_machines(report):
    _, markdown = report
    gpu = [r for r in read(H200 / "gpu_sweep.csv") if r["backend"] == "gpu"]
    cpu = [r for r in read(EPYC / "cpu_sweep.csv") if r["backend"] == "cpu"]
    gpu_time = {(int(r["nodes"]), int(r["bytes"])): float(r["time_us"]) for r in gpu}
    best = max(
        float(r["time_us"]) / gpu_time[key]
        for r in cpu
        if (key := (int(r["nodes"]), int(r["bytes"]))) in gpu_time
    )
    headline = next(line for line in markdown.splitlines() if "Largest GPU/CPU" in line)
    shown = headline.split("speedup: ")[1].split("×")[0]
    assert close(shown, best), (shown, best)
    # The local copy of the EPYC sweep ties with the reference: either is the slow side.
    assert "@ nvidia-h200 N=" in headline
    assert "Two runs on two machines (nvidia-h200; " in headline


@pytest.mark.slow
def test_every_reference_series_names_its_machine(report):
    _, markdown = report
    table = md_table(markdown, "Bandwidth at the largest size, per backend and N")
    gpu_rows = [row for row in table if row["series"].startswith("gpu")]
    assert gpu_rows and all(row["series"].endswith("@ nvidia-h200") for row in gpu_rows)
    # The local copy of the EPYC sweep is this run's: it carries no machine.
    local = [row for row in table if row["series"] == "cpu pairwise"]
    assert {int(row["N"]) for row in local} == {2, 4}
    assert any(row["series"] == "cpu pairwise @ amd-epyc-2core" for row in table)
    assert "The runs come from different machines (amd-epyc-2core, nvidia-h200" in markdown


@pytest.mark.slow
def test_reference_kernel_sweep_and_profile_are_drawn(report):
    built, markdown = report
    assert {"kernel_bandwidth", "profile_steps", "gpu_vs_cpu_speedup"} <= set(built.drawn)
    rows = read(H200 / "kernel_bw.csv")
    last = max(rows, key=lambda r: int(r["bytes"]))
    (row,) = md_table(markdown, "Reduction kernel against the device copy (one GPU)")
    assert row["run"] == "nvidia-h200/kernel_bw"
    assert size(row["largest size"]) == int(last["bytes"])
    ratio = float(last["kernel_GBps"]) / float(last["copy_GBps"])
    assert close(row["kernel / copy"], 100 * ratio)
    memops = read(H200 / "profiles" / "4gpu" / "tables" / "memops.csv")
    # Raw profile tables are folded (<details>) below the findings.
    folded = markdown.replace("<details><summary>", "### ").replace("</summary>", "")
    shown = md_table(folded, "nvidia-h200/4gpu: memops")
    assert [row["count"] for row in shown] == [row["count"] for row in memops]
    # GPU steps wait on the device, not in host calls: no host wait share for them.
    assert "Share of ring-step time spent waiting" not in markdown
    inputs = md_table(markdown.replace("\n## Inputs\n", "\n### Inputs\n"), "Inputs")
    kinds = {row["name"]: row["kind"] for row in inputs}
    assert kinds["nvidia-h200/gpu_sweep"] == "sweep, measured on nvidia-h200 (reference)"
    assert kinds["nvidia-h200/4gpu"] == "profile, measured on nvidia-h200 (reference)"
    assert kinds["cpu_sweep"] == "sweep"


@pytest.mark.slow
def test_a_reference_does_not_count_as_measured_here(report):
    _, markdown = report
    section = markdown.split("## Not measured")[1].split("\n## ")[0]
    # The H200 measured the GPU ring, its kernel sweep and a 4-node profile; this run did not.
    for what in ("GPU ring (CuPy", "reduction-kernel bandwidth", "GPU ring, N = 4"):
        assert what in section, what


@pytest.mark.slow
def test_cli_takes_references(tmp_path):
    done = run_report(
        "--reference", str(EPYC), "--figures", str(tmp_path / "f"), "--out", str(tmp_path / "r")
    )
    assert done.returncode == 0, done.stderr
    assert "@ amd-epyc-2core" in (tmp_path / "r" / "report.md").read_text(encoding="utf-8")


def test_bad_reference_folders_name_the_problem(tmp_path):
    kwargs = {"figures_dir": tmp_path / "f", "out_dir": tmp_path / "r"}
    with pytest.raises(ReportInputError, match="no such reference folder"):
        build_report([], references=[tmp_path / "absent"], **kwargs)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportInputError, match="holds no result"):
        build_report([], references=[tmp_path / "empty"], **kwargs)
    twin = tmp_path / "other" / EPYC.name
    shutil.copytree(EPYC, twin)
    with pytest.raises(ReportInputError, match="share a name"):
        build_report([], references=[EPYC, twin], **kwargs)
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(EPYC / "cpu_sweep.csv", broken / "cpu_sweep.csv")  # no JSON beside it
    with pytest.raises(ReportInputError, match=r"cpu_sweep\.json: missing"):
        build_report([], references=[broken], **kwargs)
    assert not (tmp_path / "r").exists()


def test_a_references_timed_calls_are_read_with_its_sweep_not_as_one():
    """A reference sweep kept with its FILE.samples.csv: one sweep, whose ratios take their
    intervals from those calls."""
    found = discover_reference(EPYC)["sweeps"]
    assert EPYC / "cpu_algorithms.csv" in found
    assert not [p for p in found if p.name.endswith(".samples.csv")]
    runs = {run.name: run for run in load_inputs([], references=[EPYC]).runs}
    assert len(samples_of(runs["amd-epyc-2core/cpu_algorithms"])) > 0


def test_collect_inputs_keeps_references_apart(tmp_path):
    chosen = collect_inputs(references=[H200])
    assert chosen["references"] == [H200]
    assert chosen["sweeps"] == []


@pytest.mark.slow
def test_workflow_report_draws_the_configured_references(tmp_path):
    from workflow_helpers import copy_workflow, dry_run

    with_refs = copy_workflow(tmp_path / "with", extra=("results/reference",))
    (report,) = [j for j in dry_run(with_refs, ["report"], config_args=["gpus=0"])
                 if j.rule == "build_report"]  # fmt: skip
    assert f"--reference results/reference/{H200.name}" in report.shell
    assert f"--reference results/reference/{EPYC.name}" in report.shell
    bare = copy_workflow(tmp_path / "bare")
    (report,) = [j for j in dry_run(bare, ["report"], config_args=["gpus=0"])
                 if j.rule == "build_report"]  # fmt: skip
    assert "--reference" not in report.shell
