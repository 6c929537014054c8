"""The harness as a drop-in for nccl-tests' all_reduce_perf: its option names, and stdout
that a parser written from nccl-tests' output format reads (src/util.cu: one line per size
``size count type redop root``, then ``time algbw busbw #wrong`` out of place and in place;
``# Out of bounds values : N OK|FAILED`` and one ``# Avg bus bandwidth : %g`` at the end),
read the ways its users read it: a regex, column positions, split fields."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess

import numpy as np
import pytest

import ring.bench.ceilings
from ring.bench.__main__ import main
from ring.bench.backends import CpuBackend, CpuSession, register_backend, unregister_backend
from ring.bench.nccl_compat import (
    ALL_DTYPES,
    aggregate_ranks,
    linear_sizes,
    nccl_type_name,
    rank_mean_stats,
    should_check,
)
from ring.ops import ARITHMETIC as OPS

MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK")


@pytest.fixture(autouse=True)
def small_and_local(monkeypatch):
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: 1 << 20)
    for name in MPI_ENV:
        monkeypatch.delenv(name, raising=False)


def _number(text: str) -> float | None:
    return None if text == "N/A" else float(text)


def parse_nccl_tests(stdout: str) -> dict:
    """nccl-tests' all_reduce_perf output, read the way its users' scripts read it."""
    rows, footer = [], {}
    for line in stdout.splitlines():
        if line.startswith("#"):
            match = re.match(r"^# (Out of bounds values|Avg bus bandwidth)\s*: (\S+)", line)
            if match:
                footer.setdefault(match.group(1), []).append(match.group(2))
            continue
        fields = line.split()
        if not fields:
            continue
        size, count, dtype, redop, root = fields[:5]
        groups = [fields[5:9], fields[9:13]]
        rows.append(
            {
                "size": int(size),
                "count": int(count),
                "type": dtype,
                "redop": redop,
                "root": int(root),
                **{
                    f"{place}_{key}": _number(value)
                    for place, group in zip(("oop", "ip"), groups, strict=True)
                    for key, value in zip(("time", "algbw", "busbw", "wrong"), group, strict=True)
                },
            }
        )
    return {"rows": rows, "footer": footer}


def read_csv(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


NCCL_STYLE = [
    *("--minbytes", "8", "--maxbytes", "512", "--stepfactor", "4"),
    *("--iters", "3", "--warmup_iters", "1", "--check", "1", "--datatype", "double"),
    *("--op", "sum", "-T", "60", "--backend", "cpu", "--nodes", "3"),
]


# What nccl-tests' users match a result line with (the shape of the parsers in cluster
# acceptance suites): 13 fields, a number in every time, algbw and busbw, out of place and
# in place, an integer #wrong.
NCCL_ROW = re.compile(
    r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)"
    r"\s+(?P<oop_time>[\d.]+)\s+(?P<oop_algbw>[\d.]+)\s+(?P<oop_busbw>[\d.]+)\s+(?P<oop_wrong>\d+)"
    r"\s+(?P<ip_time>[\d.]+)\s+(?P<ip_algbw>[\d.]+)\s+(?P<ip_busbw>[\d.]+)\s+(?P<ip_wrong>\d+)"
)
# all_reduce_perf's first line (src/util.cu), as scripts grep it for the run's settings.
NCCL_HEADER = re.compile(
    r"^# nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+) step: (\d+)\((factor|bytes)\) "
    r"warmup iters: (\d+) iters: (\d+) agg iters: (\d+) validation: (\d+) graph: (\d+)$"
)


def table_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.strip() and not line.startswith("#")]


def test_nccl_tests_options_and_stdout(tmp_path, capsys):
    out = tmp_path / "run.csv"
    assert main([*NCCL_STYLE, "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    parsed = parse_nccl_tests(stdout)
    csv_rows = read_csv(out)
    assert [r["size"] for r in parsed["rows"]] == [8, 32, 128, 512]
    assert [r["size"] for r in parsed["rows"]] == [int(r["bytes"]) for r in csv_rows]
    for row, written in zip(parsed["rows"], csv_rows, strict=True):
        assert row["count"] == row["size"] // 8 and row["type"] == "double"
        assert row["redop"] == "sum" and row["root"] == -1
        for place, prefix in (("ip", ""), ("oop", "oop_")):
            assert row[f"{place}_time"] == pytest.approx(
                float(written[f"{prefix}time_us"]), abs=0.006
            )
            algbw = row["size"] / row[f"{place}_time"] / 1e3
            assert row[f"{place}_algbw"] == pytest.approx(algbw, abs=0.01)
            # Both printed to 2 decimals: 0.005 + 0.005 * 4/3 apart at most.
            expected = row[f"{place}_algbw"] * 4 / 3
            assert row[f"{place}_busbw"] == pytest.approx(expected, abs=0.012)
            assert row[f"{place}_wrong"] == 0
    assert parsed["footer"]["Out of bounds values"] == ["0"]
    (average,) = parsed["footer"]["Avg bus bandwidth"]  # one line, as nccl-tests prints
    both = [float(r[k]) for r in csv_rows for k in ("busbw_GBps", "oop_busbw_GBps")]
    assert float(average) == pytest.approx(np.mean(both), rel=1e-5)
    (header,) = [m for m in map(NCCL_HEADER.match, stdout.splitlines()) if m]
    assert header.groups() == (*("1", "1", "8", "512", "4", "factor", "1", "3", "1", "1", "0"),)


def test_a_parsers_regex_and_column_positions_read_every_row(tmp_path, capsys):
    out = tmp_path / "run.csv"
    args = ["-b", "8", "-e", "128K", "-f", "8", "-n", "3", "-w", "1", "-g", "1", "-t", "1"]
    assert main([*args, "--backend", "cpu,numpy-direct", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    lines = table_lines(stdout)
    rows = read_csv(out)
    assert len(lines) == len(rows) == 2 * 5  # 8 B .. 32 KiB
    matches = [NCCL_ROW.match(line) for line in lines]
    assert all(matches), [line for line, m in zip(lines, matches, strict=True) if not m]
    for match in matches:
        assert match["type"] == "float" and int(match["size"]) == 4 * int(match["count"])
        assert float(match["oop_time"]) > 0 and float(match["ip_time"]) > 0
        assert match["oop_wrong"] == match["ip_wrong"] == "0"
    # awk '{print $8}' (out-of-place busbw) and $12 (in-place busbw): numbers, the CSV's.
    for column, key in ((8, "oop_busbw_GBps"), (12, "busbw_GBps")):
        if shutil.which("awk"):
            done = subprocess.run(
                ["awk", f"!/^#/ && NF {{print ${column}}}"],
                input=stdout,  # the whole of it: awk skips the '#' lines
                capture_output=True,
                text=True,
                check=True,
            )
            values = done.stdout.split()
        else:
            values = [line.split()[column - 1] for line in lines]
        shown = sorted(map(float, values))
        assert shown == pytest.approx(sorted(float(r[key]) for r in rows), abs=0.006)


def test_in_place_only_leaves_the_out_of_place_group_n_a(tmp_path, capsys):
    out = tmp_path / "run.csv"
    args = ["-b", "64", "-e", "256", "-n", "2", "-w", "0", "--out-of-place", "0"]
    assert main([*args, "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "# out-of-place: not measured (--out-of-place 0): N/A" in stdout
    for row in parse_nccl_tests(stdout)["rows"]:
        assert [row[f"oop_{k}"] for k in ("time", "algbw", "busbw", "wrong")] == [None] * 4
        assert row["ip_time"] > 0
    assert all(r["oop_time_us"] == "" for r in read_csv(out))


def test_linear_steps(tmp_path, capsys):
    args = [
        "-b",
        "1K",
        "-e",
        "3K",
        "-i",
        "1K",
        "-n",
        "2",
        "-w",
        "0",
        "--out",
        str(tmp_path / "r.csv"),
    ]
    assert main(args) == 0
    assert [r["size"] for r in parse_nccl_tests(capsys.readouterr().out)["rows"]] == [
        1024,
        2048,
        3072,
    ]
    assert linear_sizes(10, 40, 10, 4) == [8, 20, 28, 40]


def test_every_dtype_and_op(tmp_path, capsys):
    out = tmp_path / "all.csv"
    args = ["-b", "64", "-e", "64", "-n", "1", "-w", "0", "-d", "all", "-o", "all"]
    assert main([*args, "--backend", "numpy-direct", "--out", str(out)]) == 0
    pairs = {(r["dtype"], r["op"]) for r in read_csv(out)}
    assert pairs == {(d, o) for d in ALL_DTYPES for o in OPS}
    rows = parse_nccl_tests(capsys.readouterr().out)["rows"]
    assert {(r["type"], r["redop"]) for r in rows} == {(nccl_type_name(d), o) for d, o in pairs}
    assert {nccl_type_name(d) for d in ALL_DTYPES} == {
        *("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double")
    }
    assert all(r["ip_wrong"] == 0 and r["oop_wrong"] == 0 for r in rows)


class _WrongOnCall(CpuSession):
    """Our ring, then one wrong element after the call numbered ``WRONG`` (0 = first)."""

    WRONG = 0

    def load(self, inputs):
        super().load(inputs)
        self.made = 0

    def collective(self) -> None:
        super().collective()
        if self.made == self.WRONG:
            self.buffers[-1][-1] += 1
        self.made += 1


@pytest.fixture
def wrong_on_first_call():
    @register_backend
    class WrongOnFirst(CpuBackend):
        name = "test-wrong-on-first-call"

        def open(self, nodes, sync, config, world):
            return _WrongOnCall(nodes, sync, config, world)

    yield WrongOnFirst.name
    unregister_backend(WrongOnFirst.name)


@pytest.mark.parametrize(
    ("every", "place", "code", "wrong"),
    [("1", "1", 1, "1"), ("2", "1", 0, "0"), ("0", "1", 0, ""), ("1", "0", 1, "1")],
)
def test_check_every_nth_call(tmp_path, wrong_on_first_call, every, place, code, wrong):
    # The first call is wrong: out of place when measured (it comes first), else in place.
    out = tmp_path / "r.csv"
    args = ["-b", "64", "-e", "64", "-n", "4", "-w", "0", "-c", every, "--out-of-place", place]
    assert main([*args, "--backend", wrong_on_first_call, "--out", str(out)]) == code
    (row,) = read_csv(out)
    if place == "1":
        assert (row["oop_wrong"], row["wrong"]) == (wrong, wrong and "0")
    else:
        assert (row["oop_wrong"], row["wrong"]) == ("", wrong)


def test_should_check():
    assert [c for c in range(7) if should_check(3, c, 7)] == [2, 5, 6]
    assert [c for c in range(4) if should_check(1, c, 4)] == [0, 1, 2, 3]
    assert not any(should_check(0, c, 4) for c in range(4))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-f", "2", "-i", "1K"], "not both"),
        (["-i", "0"], "at least 1 byte"),
        (["-a", "4"], "0, 1, 2 or 3"),
        (["-c", "x"], "not a whole number"),
        (["-d", "all", "-o", "mean"], "unknown op"),
    ],
)
def test_bad_nccl_options(tmp_path, capsys, args, message):
    assert main([*args, "--out", str(tmp_path / "r.csv")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "r.csv").exists()


def test_rank_aggregation_and_osu_statistics():
    rng = np.random.default_rng(5)
    times = rng.uniform(1e-6, 1e-3, size=(4, 9))
    assert np.array_equal(aggregate_ranks(times, 0), times[0])
    assert np.allclose(aggregate_ranks(times, 1), times.sum(axis=0) / 4)
    assert np.array_equal(aggregate_ranks(times, 2), times.min(axis=0))
    assert np.array_equal(aggregate_ranks(times, 3), times.max(axis=0))
    means = [sum(float(t) for t in rank) / 9 * 1e6 for rank in times]
    stats = rank_mean_stats(times)
    assert stats["rank_mean_us_min"] == pytest.approx(min(means))
    assert stats["rank_mean_us_avg"] == pytest.approx(sum(means) / 4)
    assert stats["rank_mean_us_max"] == pytest.approx(max(means))
