"""Faults around the harness's output and validation: bad ``--out`` found before any work, a
full disk or a Ctrl-C while the result pair is written, a mismatched pair, a wrong call
that is not the last, float16 products that underflow."""

from __future__ import annotations

import errno
import itertools
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ctrl_c import let_children_see_sigint

import ring.bench.ceilings
import ring.bench.results
from ring.bench.__main__ import main
from ring.bench.backends import CpuBackend, CpuSession, register_backend, unregister_backend
from ring.bench.outputs import file_problem
from ring.bench.results import check_pair, text_sha256

let_children_see_sigint()

TINY = ["-b", "4", "-e", "4K", "-f", "8", "-n", "3", "-w", "1"]


@pytest.fixture(autouse=True)
def small_ceilings(monkeypatch):
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: 1 << 20)


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ring.bench: error: "), captured.err
    return lines[0]


@pytest.mark.parametrize("out", ["/proc/ring-bench/r.csv", "DIR"])
def test_unwritable_out_is_refused_before_anything_is_measured(tmp_path, capsys, out):
    if out == "DIR":
        (tmp_path / "d.csv").mkdir()
        out = str(tmp_path / "d.csv")
    assert main([*TINY, "--out", out]) == 2
    line = _one_error_line(capsys)
    assert "cannot write" in line or "is a directory" in line
    assert capsys.readouterr().out == ""


def test_a_full_disk_at_the_end_is_one_line_exit_2_and_keeps_the_old_pair(
    tmp_path, capsys, monkeypatch
):
    out = tmp_path / "r.csv"
    assert main([*TINY, "--out", str(out)]) == 0
    samples = out.with_suffix(".samples.csv")
    before = out.read_bytes(), out.with_suffix(".json").read_bytes(), samples.read_bytes()
    capsys.readouterr()

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ring.bench.results, "_temporary_beside", full)
    assert main([*TINY, "--out", str(out)]) == 2
    assert "No space left on device" in _one_error_line(capsys)
    assert (out.read_bytes(), out.with_suffix(".json").read_bytes(), samples.read_bytes()) == before
    # The pair and its per-call samples, as the first run left them; no temporary.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.json", "r.samples.csv"]


def test_a_ctrl_c_while_the_pair_is_written_leaves_a_whole_matching_pair(tmp_path):
    # A real SIGINT, sent by the process to itself between the two renames.
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        import ring.bench.ceilings, ring.bench.results as results
        from ring.bench.__main__ import main
        ring.bench.ceilings.host_array_bytes = lambda: 1 << 20
        real = os.replace
        def replace(src, dst):
            real(src, dst)
            if str(dst).endswith(".csv"):
                os.kill(os.getpid(), signal.SIGINT)
        results.os.replace = replace
        sys.exit(main({TINY!r} + ["--out", {str(tmp_path / "r.csv")!r}]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert "interrupted after writing" in done.stderr
    out = tmp_path / "r.csv"
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["csv_sha256"] == text_sha256(out.read_text())
    # The pair and the samples written with it, whole; no temporary.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "r.json", "r.samples.csv"]


def test_a_mismatched_pair_is_named_by_merge(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert main([*TINY, "--out", str(out)]) == 0
    with open(out, "a") as handle:
        handle.write(handle.name and "")  # same text: still matches
    assert check_pair(out, json.loads(out.with_suffix(".json").read_text())) is None
    out.write_text(out.read_text().replace("float32", "float32 "))
    capsys.readouterr()
    assert main(["merge", "--out", str(tmp_path / "m.csv"), str(out)]) == 2
    assert "does not match" in _one_error_line(capsys)


def test_merge_refuses_an_unwritable_out_before_reading(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert main([*TINY, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["merge", "--out", "/proc/ring-merge/m.csv", str(out)]) == 2
    assert "cannot write" in _one_error_line(capsys)


class _WrongOnFirstCall(CpuSession):
    """Right on every call but the first timed one: only a per-call check sees it."""

    timed = 0

    def timed_call(self) -> None:
        super().timed_call()
        _WrongOnFirstCall.timed += 1
        if _WrongOnFirstCall.timed == 1:
            self.buffers[0][0] += 1


def test_check_sees_a_wrong_call_that_is_not_the_last(tmp_path, capsys):
    @register_backend
    class WrongOnce(CpuBackend):
        name = "test-wrong-once"

        def open(self, nodes, sync, config, world):
            return _WrongOnFirstCall(nodes, sync, config, world)

    try:
        code = main(
            [
                "-b",
                "4K",
                "-e",
                "4K",
                "-n",
                "5",
                "-w",
                "0",
                "--backend",
                "test-wrong-once",
                "--out",
                str(tmp_path / "r.csv"),
            ]
        )
    finally:
        unregister_backend(WrongOnce.name)
    assert code == 1
    assert "1 FAILED" in capsys.readouterr().out


def test_float16_products_that_underflow_are_not_counted_wrong(tmp_path):
    out = tmp_path / "r.csv"
    args = ["-b", "2K", "-e", "2K", "-n", "2", "-w", "0", "-d", "float16", "-o", "prod"]
    assert main([*args, "--nodes", "200", "--out", str(out)]) == 0
    rows = out.read_text().splitlines()
    assert rows[1].split(",")[rows[0].split(",").index("wrong")] == "0"
    # ...while a missing contribution in the normal range still is.
    reference = np.float64(0.75) ** 3
    from ring.bench import data

    assert data.count_wrong(np.array([0.75**2], np.float16), np.array([reference]), 1e-2) == 1


def test_tolerance_allows_the_dtype_range_not_more():
    from ring.bench import data

    tiny = float(np.finfo(np.float16).tiny)
    want = np.array([tiny / 8, 0.5], dtype=np.float64)
    assert data.count_wrong(np.array([0, 0.5], np.float16), want, 1e-3) == 0
    assert data.count_wrong(np.array([0, 0.6], np.float16), want, 1e-3) == 1
    assert data.count_wrong(np.array([3 * tiny, 0.5], np.float16), want, 1e-3) == 1


def test_sample_windows_cover_both_ends_and_stay_in_range():
    from ring.bench import data

    for count in (1, 2, 7, 100, 10**6):
        windows = data.sample_windows(0, count)
        assert windows[0][0] == 0 and windows[-1][1] == count
        assert all(0 <= a < b <= count for a, b in windows)
        assert all(b < c for (_, b), (c, _) in itertools.pairwise(windows))
        assert len(windows) <= data.SAMPLE_WINDOWS
    assert data.sample_windows(0, 0) == []


# -- the report and the nsys tools: bad outputs refused before any work ------------------


def _run_module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, timeout=120
    )


def test_report_refuses_an_unwritable_out_before_drawing_a_figure(tmp_path):
    figures = tmp_path / "figures"
    reference = "results/reference/amd-epyc-2core/cpu_sweep.csv"
    done = _run_module(
        "ring.report", "--sweep", reference, "--figures", str(figures), "--out", "/proc/ring/report"
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot write to --out" in done.stderr
    assert not figures.exists()


@pytest.mark.parametrize("command", ["tables", "summary"])
def test_nsys_tools_refuse_an_unwritable_out(tmp_path, command):
    stats = tmp_path / "p_nvtx_sum.csv"
    stats.write_text("Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
                     "StdDev (ns),Style,Range\n")  # fmt: skip
    if command == "tables":
        done = _run_module("ring.nsys", "tables", "--out", "/proc/ring/t", str(stats))
    else:
        done = _run_module("ring.nsys", "summary", str(tmp_path), "--out", "/proc/ring/s.md")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot write" in done.stderr


def test_an_out_under_a_file_names_that_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "out.json"
    said = file_problem(out, "--out")
    assert said == f"--out {str(out)!r} is under {str(blocker)!r}, which is not a folder"


@pytest.mark.parametrize("command", ["fit", "decisions"])
def test_the_models_outputs_are_refused_before_fitting_in_one_line(tmp_path, command):
    reference = "results/reference/amd-epyc-2core/cpu_sweep.csv"
    blocker = tmp_path / "file"
    blocker.write_text("")
    if command == "fit":
        done = _run_module("ring.model", "fit", reference, "--out", str(blocker / "fit.json"))
    else:
        fit = tmp_path / "fit.json"
        assert _run_module("ring.model", "fit", reference, "--out", str(fit)).returncode == 0
        done = _run_module("ring.model", "decisions", str(fit), "--out", str(blocker / "d.json"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "not a folder" in done.stderr


def test_nsys_tables_name_a_binary_input(tmp_path):
    stats = tmp_path / "p_nvtx_sum.csv"
    stats.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    done = _run_module("ring.nsys", "tables", "--out", str(tmp_path / "t"), str(stats))
    assert done.returncode == 2
    assert str(stats) in done.stderr and "not a text CSV" in done.stderr


def test_nsys_tables_refuse_a_row_cut_inside_its_last_field(tmp_path):
    stats = tmp_path / "p_nvtx_sum.csv"
    stats.write_text(
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),"
        "Style,Range\n"
        "60.0,600,3,200.0,200.0,190,210,5.0,PushPop,ring:reduce_scatter step 1 node 2\n"
        "40.0,400,3,133.3,133.0,120,150,5.0,PushPop,ring:all_gather step 1 no"
    )
    done = _run_module("ring.nsys", "tables", "--out", str(tmp_path / "t"), str(stats))
    assert done.returncode == 2
    assert str(stats) in done.stderr and "cut short" in done.stderr
    assert not (tmp_path / "t").exists()
