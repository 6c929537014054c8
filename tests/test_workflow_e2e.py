"""The workflow for real, on this machine, with config/ci.yaml and no GPU:

* `snakemake --cores 8 all` in a copy of the repository produces every file its plan
  promises, the report included, and a second run has nothing to do;
* its benchmark jobs never overlap in time, cores to spare notwithstanding, while benchmark
  jobs do overlap once the `bench` resource is lifted (so the check can see an overlap when
  there is one).
"""

from __future__ import annotations

import base64
import json
from itertools import combinations
from pathlib import Path

import pytest
from workflow_helpers import CPU_JOBS, TIMED_RULES, copy_workflow, parse_plan, snakemake

# Whole workflow runs, each of several Snakemake calls of up to 600 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

# ring/ travels with the workflow: the jobs run `python -m ring...` from the copy's root.
EXTRA = ("ring",)


def run_ok(workdir: Path, *args: str) -> str:
    done = snakemake(workdir, *args, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return output


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    """A copy of the repository after `snakemake --cores 8 all --configfile config/ci.yaml`:
    more cores than any one job takes, so only the `bench` resource keeps the timed jobs
    apart (test_benchmark_jobs_never_overlap_even_with_spare_cores)."""
    workdir = copy_workflow(tmp_path_factory.mktemp("e2e"), EXTRA)
    args = ("all", "--configfile", "config/ci.yaml", "--config", "gpus=0")
    plan = parse_plan(run_ok(workdir, "-n", *args))
    output = run_ok(workdir, "--cores", "8", *args)
    return {"workdir": workdir, "plan": plan, "output": output, "args": args}


def test_all_writes_every_promised_file(e2e):
    workdir = e2e["workdir"]
    promised = [path for job in e2e["plan"] for path in job.output]
    assert "results/report/index.html" in promised
    missing = [path for path in promised if not (workdir / path).exists()]
    assert not missing
    empty = [
        path
        for path in promised
        if (workdir / path).is_file() and (workdir / path).stat().st_size == 0
    ]
    assert not empty
    figures = sorted(p.name for p in (workdir / "results/figures").glob("*.png"))
    assert figures, "the report rule drew no figure"
    # The run ends by saying where the report is (onsuccess), not only in the log.
    said = [line for line in e2e["output"].splitlines() if line.startswith("report: ")]
    assert said and said[-1].startswith("report: results/report/index.html"), said
    # Snakemake's own record of each timed job, beside its log.
    assert list((workdir / "results/logs").rglob("*.benchmark.tsv"))


def test_all_runs_no_gpu_job_and_the_report_says_why(e2e):
    rules = {job.rule for job in e2e["plan"]}
    assert not rules & {"gpu_run", "kernel_bw_sweep", "nsys_profile_gpu"}
    workdir = e2e["workdir"]
    absent = json.loads((workdir / "results/report/not_measured.json").read_text())
    assert any(entry["what"].startswith("GPU sweeps at N = 4") for entry in absent)
    report = (workdir / "results/report/report.md").read_text()
    appendix = (workdir / "results/report/appendix.md").read_text()
    # The report says it has no GPU result; the appendix says why, and what would make one.
    assert "GPU" in report and "snakemake --cores 8 gpu" in appendix


def test_second_run_has_nothing_to_do(e2e):
    output = run_ok(e2e["workdir"], "--cores", "2", *e2e["args"])
    assert "Nothing to be done" in output


def job_intervals(workdir: Path) -> list[tuple[str, float, float]]:
    """(log, start, end) of every timed job, from Snakemake's own metadata records."""
    jobs: dict[str, tuple[float, float]] = {}
    for record_path in (workdir / ".snakemake/metadata").iterdir():
        record = json.loads(record_path.read_text())
        if record.get("rule") not in TIMED_RULES:
            continue
        output = base64.urlsafe_b64decode(record_path.name).decode()
        key = record["log"][0] if record.get("log") else output
        start, end = jobs.get(key, (record["starttime"], record["endtime"]))
        jobs[key] = (min(start, record["starttime"]), max(end, record["endtime"]))
    return [(key, start, end) for key, (start, end) in jobs.items()]


def overlaps(intervals) -> list[tuple[str, str]]:
    return [
        (a, b)
        for (a, a_start, a_end), (b, b_start, b_end) in combinations(intervals, 2)
        if a_start < b_end and b_start < a_end
    ]


def test_benchmark_jobs_never_overlap_even_with_spare_cores(e2e, tmp_path):
    # Every timed job of `all`, run with --cores 8: the sweeps, algorithm sweeps, the
    # alternated comparison and the profile with its overhead runs, one at a time.
    intervals = job_intervals(e2e["workdir"])
    timed = [job for job in e2e["plan"] if job.rule in TIMED_RULES]
    assert len(intervals) == len(timed) >= 2 * CPU_JOBS
    assert overlaps(intervals) == []

    # Control: the cpu sweeps with the limit lifted do run side by side on 8 cores, so the
    # check above would have seen an overlap had the profile not prevented it. One series
    # and one size (the jobs, not what they measure, are under test) in a fresh copy.
    workdir = copy_workflow(tmp_path / "wf", EXTRA)
    (workdir / "tiny.yaml").write_text(
        "cpu:\n  backends: [cpu]\n  sync: [pairwise]\n  min_bytes: 1K\n  max_bytes: 1K\n"
    )
    sweeps = [f"results/cpu/sweep_n{nodes}_float32.csv" for nodes in (2, 3)]
    # (--resources and --config take lists: the targets go first.)
    config = ("--configfile", "config/ci.yaml", "tiny.yaml", "--config", "gpus=0")
    run_ok(workdir, "--cores", "8", *sweeps, "--resources", "bench=8", *config)
    intervals = job_intervals(workdir)
    assert len(intervals) == CPU_JOBS
    assert overlaps(intervals)


def test_snakemake_report_carries_every_figure_with_its_caption(e2e):
    from ring.report.draw.specs import SPECS

    workdir = e2e["workdir"]
    run_ok(workdir, "--report", "results/report/snakemake.html", *e2e["args"])
    html = (workdir / "results/report/snakemake.html").read_text(encoding="utf-8")
    drawn = sorted(path.stem for path in (workdir / "results/figures").glob("*.png"))
    assert drawn
    for name in drawn:
        assert f"{name}.png" in html
        # The caption's opening words (the page escapes non-ASCII characters).
        words = SPECS[name].caption.split()[:4]
        opening = " ".join(word for word in words if word.isascii())
        assert opening in html, name
