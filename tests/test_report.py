"""The report built from tiny runs in the workflow's layout: its shape, and every number it
shows read back against the result files with code of the tests' own."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_helpers import ROOT, close, md_table, number, run_report, size

from ring.report import FIGURES, build_report, collect_inputs
from ring.report.derive.model import ReportModel
from ring.report.draw import drawing
from ring.report.load import load_inputs
from ring.report.render.render import MAX_LINES


def _csv(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _section(text: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def test_the_report_is_short_and_in_the_readers_order(built, markdown):
    lines = markdown.splitlines()
    assert len(lines) <= MAX_LINES
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == [
        "## What we found",
        "## How this was measured",
        "## nccl-tests' tables",
        "## The original study at its own size",
        "## What the profiles show",
        "## Figures",
    ]
    assert built.html.is_file() and built.appendix.is_file()
    assert "<script" not in built.html.read_text() and 'src="http' not in built.html.read_text()


def test_findings_come_from_the_confirmation_with_launches_and_intervals(results, markdown):
    found = _section(markdown, "What we found")
    sentences = [line for line in found.splitlines() if line.startswith("- **")]
    assert sentences, found
    for sentence in sentences:
        assert "launches" in sentence, sentence
        if "no clear difference" not in sentence:
            assert re.search(r"range over \d launches [\d.]+×–[\d.]+×, a \d+ % interval", sentence)
            assert "picked in a screen of" in sentence and "confirm_n2_float32" in sentence
            assert "α" in sentence or "no fit" in sentence


def test_every_ratio_of_the_confirmation_table_is_the_launches_own(results, markdown):
    """Each row's ratio is the median of each launch's time(peer) / time(pick), and its
    range their extremes, recomputed from the launch set's CSV with the tests' own code."""
    rows = _csv(results / "cpu" / "confirm_n2_float32.csv")
    finalists = json.loads((results / "cpu" / "finalists_n2_float32.json").read_text())
    table = md_table(
        markdown, "cpu, N = 2: the screen's pick against the fastest peer (`confirm_n2_float32`, "
        "3 launches)"
    )  # fmt: skip
    assert len(table) == len(finalists["picks"])
    keys = ("backend", "sync", "algorithm", "graphs", "inline_bytes", "executor", "buffers")
    for shown, pick in zip(table, finalists["picks"], strict=True):
        nbytes = int(pick["bytes"])
        assert size(shown["size"]) == nbytes
        at = [r for r in rows if int(r["bytes"]) == nbytes]

        def times(key, at=at):
            return {
                r["launch"]: float(r["time_us"])
                for r in at
                if tuple(r.get(k, "") for k in keys) == key
            }

        ours = times(tuple(pick["pick"][k] for k in keys))
        peer = times(("numpy-direct", "none", "numpy-direct", "", "", "", ""))
        ratios = sorted(peer[k] / ours[k] for k in ours)
        low, high = (
            number(shown["range over launches"].split("–")[0]),
            number(shown["range over launches"].split("–")[1]),
        )
        assert close(shown["peer / ours"], ratios[1])  # the median of 3
        # The times shown are the median launch's: they divide to the ratio shown.
        quotient = number(shown["peer (µs)"]) / number(shown["ours (µs, median launch)"])
        assert quotient == pytest.approx(number(shown["peer / ours"]), rel=0.012)
        assert low <= number(shown["peer / ours"]) <= high
        assert close(f"{low}", ratios[0]) and close(f"{high}", ratios[-1])


def test_every_ratios_point_lies_inside_its_interval(results):
    chosen = collect_inputs(results)
    inputs = load_inputs(chosen["runs"], confirmations=chosen["confirmations"], fits=chosen["fits"])
    model = ReportModel(inputs)
    points = [p for c in model.confirmations for p in c.points if p.ratio is not None]
    assert points
    for point in points:
        r = point.ratio
        assert r.low <= r.point <= r.high
        assert r.launches >= 2 and 0 < r.confidence < 1


def _nccl_blocks(text: str) -> dict[str, list[list[str]]]:
    blocks = {}
    for block in re.findall(r"```text\n(.*?)```", text, flags=re.S):
        lines = block.splitlines()
        title = lines[0].removeprefix("# ")
        blocks[title] = [line.split() for line in lines if line and not line.startswith("#")]
    return blocks


def test_nccl_tables_hold_both_groups_and_match_the_sweep(results, appendix):
    blocks = _nccl_blocks(_section(appendix, "nccl-tests' tables, every backend and N"))
    title = "cpu ring (nodes), N = 2 (sweep_n2_float32)"
    assert title in blocks, list(blocks)
    rows = {
        int(r["bytes"]): r
        for r in _csv(results / "cpu" / "sweep_n2_float32.csv")
        if r["backend"] == "cpu" and r["sync"] == "pairwise"
    }
    for line in blocks[title]:
        nbytes, count, kind, op = int(line[0]), int(line[1]), line[2], line[3]
        row = rows[nbytes]
        assert (count, kind, op) == (int(row["count"]), "float", "sum")
        oop, ip = line[4:8], line[8:12]
        assert float(oop[0]) == pytest.approx(float(row["oop_time_us"]), abs=0.051)
        assert float(ip[0]) == pytest.approx(float(row["time_us"]), abs=0.051)
        assert float(ip[2]) == pytest.approx(float(row["busbw_GBps"]), abs=0.0051)
        assert (oop[3], ip[3]) == (row["oop_wrong"], row["wrong"]) == ("0", "0")
    assert "# Avg bus bandwidth    : " in appendix
    assert "iterations 3, warm-up iterations 1" in appendix


def test_the_original_studys_figure_stands_beside_this_builds_run(results, markdown):
    table = md_table(markdown, "The original study at its own size")
    published = [r for r in table if r["ring"].startswith("the original study (published)")]
    assert [(r["time (ms)"], r["size"], r["N"]) for r in published] == [("331.7", "1 GiB", "4")]
    ours = [r for r in table if r["ring"].startswith("this build:")]
    rows = _csv(results / "cpu" / "original_n2_float32.csv")
    assert len(ours) == len(rows) and {size(r["size"]) for r in ours} == {256 * 1024}
    times = sorted(float(r["time_us"]) / 1e3 for r in rows)
    assert all(close(r["time (ms)"], t) for r, t in zip(ours, times, strict=True))


def test_every_panel_has_a_title_and_a_short_legend(built):
    drawn = {f.spec.name for f in built.figures if f.drawn}
    assert {"findings", "screens", "time_vs_size", "busbw", "sync_barrier_vs_pairwise"} <= drawn
    for name in drawn:
        titles = drawing.TITLES_PER_PANEL[name]
        assert titles and all(titles), (name, titles)
        assert max(drawing.LEGEND_PER_PANEL[name], default=0) <= drawing.MAX_SERIES, name


def test_figures_drawn_and_absent_ones_listed(built, markdown):
    for figure in built.figures:
        if figure.drawn:
            assert figure.png.stat().st_size > 1000 and figure.svg.is_file()
            assert f"![{figure.spec.question}]" in markdown
    assert [f.spec.name for f in built.figures] == [spec.name for spec in FIGURES]


def test_labels_say_how_each_series_ran(markdown):
    found = _section(markdown, "What we found")
    assert re.search(r"cpu [a-z-]+ \((nodes|slices|either executor), (inline|threads)", found)


def test_hostile_text_reaches_the_pages_escaped(results, tmp_path):
    """A text field of a result file (here the CPU model in a run's JSON) is data: the HTML
    pages show it, never run it."""
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    path = copy / "cpu" / "sweep_n2_float32.json"
    document = json.loads(path.read_text())
    document["environment"]["cpu_model"] = "<script>alert('x')</script><b>bold</b>"
    path.write_text(json.dumps(document))
    out = tmp_path / "out"
    done = run_report("--results", str(copy), "--figures", str(out / "f"), "--out", str(out / "r"))
    assert done.returncode == 0, done.stderr
    for page in ("index.html", "appendix.html"):
        html = (out / "r" / page).read_text()
        assert "<script>" not in html and "<b>bold</b>" not in html, page
    assert "&lt;script&gt;alert" in (out / "r" / "appendix.html").read_text()


def test_cli_builds_and_reports(results, tmp_path):
    done = run_report("--results", str(results), "--figures", str(tmp_path / "f"),
                      "--out", str(tmp_path / "r"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout and (tmp_path / "r" / "report.md").is_file()


def test_import_does_not_load_plotting():
    code = (
        "import sys, ring.report; "
        "heavy = ('pandas', 'matplotlib', 'seaborn', 'jinja2'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_stale_figure_is_removed(results, tmp_path):
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "findings.png").write_bytes(b"old")
    chosen = collect_inputs(results)
    chosen.pop("not_measured")
    result = build_report(chosen.pop("runs"), **chosen, figures_dir=figures, out_dir=tmp_path / "r")
    assert (figures / "findings.png").read_bytes() != b"old"
    assert "findings" in result.drawn


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "**bold** and *em* and `a*b*c`",
            "<strong>bold</strong> and <em>em</em> and <code>a*b*c</code>",
        ),
        ('`<tag> & "q"`', "<code>&lt;tag&gt; &amp; &quot;q&quot;</code>"),
        ("<script>x</script>", "&lt;script&gt;x&lt;/script&gt;"),  # never raw HTML
        ("2 * 3 * 4 bytes", "2 * 3 * 4 bytes"),
        ("``a `b` c``", "<code>a `b` c</code>"),  # a code span holding backticks
        ("ring_segmented_block", "ring_segmented_block"),  # no emphasis inside a word
    ],
)
def test_inline_markdown_renders_as_commonmark_says(text, expected):
    from ring.report.render import render

    assert str(render._inline_html(text)) == expected
