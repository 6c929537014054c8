"""Committed runs of other machines (``results/reference/``): read apart, shown in the
appendix's Other machines section with their machine, date and commit, and nowhere else."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from report_helpers import ROOT

from ring.report import ReportInputError, build_report, collect_inputs
from ring.report.load import discover_reference, load_reference
from ring.report.words.fmt import format_number

REFERENCES = ROOT / "results" / "reference"
EPYC, H200 = REFERENCES / "amd-epyc-2core", REFERENCES / "nvidia-h200"


def _build(results: Path, out: Path, references=()):
    chosen = collect_inputs(results, references=references)
    record = chosen.pop("not_measured")
    return build_report(
        chosen.pop("runs"),
        **chosen,
        not_measured=record[0] if record else None,
        figures_dir=out / "figures",
        out_dir=out / "report",
    )


def _without_build_time(text: str) -> str:
    return re.sub(r"Built \S+", "Built", text)


def _outside_other_machines(text: str) -> str:
    """A page without its Other machines section (the appendix's last)."""
    head, _, _ = text.partition("## Other machines")
    return _without_build_time(head)


@pytest.fixture(scope="module")
def pair(results, tmp_path_factory):
    """The same results reported without and with the committed references."""
    out = tmp_path_factory.mktemp("pair")
    return _build(results, out / "without"), _build(results, out / "with", [EPYC, H200])


def test_references_change_nothing_outside_their_section(pair):
    without, with_refs = pair
    for page in ("report.md", "appendix.md", "index.html", "appendix.html"):
        a = (without.markdown.parent / page).read_text(encoding="utf-8")
        b = (with_refs.markdown.parent / page).read_text(encoding="utf-8")
        if page.endswith(".html"):
            a, b = (re.sub(r"data:image/png;base64,[^\"]+", "", t) for t in (a, b))
            a, b = (t.partition('<h2 id="other-machines">')[0] for t in (a, b))
        assert _outside_other_machines(a) == _outside_other_machines(b), page
    for figure in with_refs.figures:
        if figure.drawn:
            twin = without.markdown.parent.parent / "figures" / figure.png.name
            assert twin.read_bytes() == figure.png.read_bytes(), figure.spec.name


NUMBER = re.compile(r"\b[\d,]*\d\.\d+\b")


def _values(runs, columns=("time_us", "busbw_GBps", "algbw_GBps")) -> set[str]:
    """Every value of these columns as the report writes numbers."""
    return {
        format_number(float(value))
        for run in runs
        for column in columns
        for value in run.rows[column].dropna()
    }


def _shown_outside(result) -> set[str]:
    report = result.markdown.read_text(encoding="utf-8")
    appendix = _outside_other_machines(result.appendix.read_text(encoding="utf-8"))
    return set(NUMBER.findall(_without_build_time(report) + appendix))


def test_no_reference_number_stands_outside_the_other_machines_section(pair):
    """Every number of a reference run that the pages show outside Other machines is shown
    there by the same report built without the references: this build's own, by chance."""
    without, with_refs = pair
    theirs = _values(run for r in (EPYC, H200) for run in load_reference(r).runs)
    inside = with_refs.appendix.read_text(encoding="utf-8").partition("## Other machines")[2]
    assert len(theirs & set(NUMBER.findall(inside))) > 20  # they are shown, in their section
    assert theirs & _shown_outside(with_refs) <= _shown_outside(without)
    for page in (with_refs.markdown, with_refs.appendix):
        outside = _outside_other_machines(page.read_text(encoding="utf-8"))
        assert "amd-epyc-2core" not in outside and "nvidia-h200" not in outside


def test_each_reference_row_names_machine_date_and_commit(pair):
    _, with_refs = pair
    inside = with_refs.appendix.read_text(encoding="utf-8").partition("## Other machines")[2]
    assert "#### amd-epyc-2core: what the folder holds" in inside
    assert "### All logical nodes on one GPU" in inside
    table = inside.partition("#### amd-epyc-2core: what the folder holds")[2]
    rows = [line for line in table.splitlines() if line.startswith("| `amd-epyc-2core/")]
    assert rows
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "amd-epyc-2core"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", cells[5]), cells
        assert re.match(r"[0-9a-f]{12}( \(dirty\))?$", cells[6]), cells


def test_bad_reference_folders_name_the_problem(results, tmp_path):
    with pytest.raises(ReportInputError, match="no such reference folder"):
        _build(results, tmp_path / "a", [tmp_path / "absent"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportInputError, match="holds no result"):
        _build(results, tmp_path / "b", [tmp_path / "empty"])
    twin = tmp_path / "other" / EPYC.name
    shutil.copytree(EPYC, twin)
    with pytest.raises(ReportInputError, match="share a name"):
        _build(results, tmp_path / "c", [EPYC, twin])
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(EPYC / "cpu_sweep.csv", broken / "cpu_sweep.csv")  # no JSON beside it
    with pytest.raises(ReportInputError, match=r"cpu_sweep\.json: missing"):
        _build(results, tmp_path / "d", [broken])
    assert not any((tmp_path / d / "report").exists() for d in "abcd")


def test_a_reference_alone_is_no_report(tmp_path):
    with pytest.raises(ReportInputError, match="no result of this build given"):
        build_report([], references=[EPYC], figures_dir=tmp_path / "f", out_dir=tmp_path / "r")


def test_a_references_timed_calls_are_read_with_its_run_not_as_one():
    found = discover_reference(EPYC)["runs"]
    assert EPYC / "cpu_algorithms.csv" in found
    assert not [p for p in found if p.name.endswith(".samples.csv")]
    runs = {run.name: run for run in load_reference(EPYC).runs}
    assert len(runs["amd-epyc-2core/cpu_algorithms"].samples) > 0


@pytest.mark.slow
def test_workflow_report_takes_the_configured_references(tmp_path):
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
