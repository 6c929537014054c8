"""The habits nccl-tests and OSU users bring: every all_reduce_perf flag accepted (honoured,
or recorded with a line saying why it cannot apply), ``-F`` as the results file, ``-a``
averaging by default, and ``--osu`` with OSU's ``-m -i -x -f`` and its table."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil

import pytest
from test_bench import outside_mpirun, small_ceilings  # noqa: F401 - autouse
from test_nccl_compat import NCCL_ROW, table_lines

from ring.bench.__main__ import _known_syncs, main
from ring.bench.backends import available_backends
from ring.bench.cli import parse_args
from ring.bench.nccl_compat import DEFAULT_AVERAGE

SMALL = ["-b", "64", "-e", "256", "-n", "2", "-w", "0"]


def read_csv(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def config_of(*args: str):
    backends = available_backends()
    return parse_args(list(args), backends, _known_syncs(backends))


@pytest.mark.parametrize(
    ("flag", "long", "value", "line"),
    [
        ("-t", "nthreads", 2, "# -t 2: cannot apply"),
        ("-g", "ngpus", 4, "# -g 4: cannot apply to backend cpu"),
        ("-m", "agg_iters", 8, "# -m 8: cannot apply: the library has no group call"),
        ("-p", "parallel_init", 1, "# -p 1: recorded"),
        ("-r", "root", 3, "# -r 3: allreduce has no root"),
        ("-z", "blocking", 2, "# -z 2: recorded"),
        ("-y", "stream_null", 1, "# -y 1: cannot apply"),
        ("-G", "cudagraph", 10, "# -G 10: recorded, not applied"),
        ("-C", "report_cputime", 1, "# -C 1: the time columns read cputime"),
    ],
)
def test_every_nccl_tests_flag_runs_and_is_recorded(tmp_path, capsys, flag, long, value, line):
    out = tmp_path / "r.csv"
    assert main([*SMALL, flag, str(value), "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert sum(text.startswith(line) for text in stdout.splitlines()) == 1
    flags = json.loads(out.with_suffix(".json").read_text())["config"]["nccl_flags"]
    assert flags[long] == value
    # The table is still nccl-tests': every row read by the parsers' regex.
    lines = table_lines(stdout)
    assert lines and all(NCCL_ROW.match(text) for text in lines)
    if long in ("nthreads", "ngpus", "agg_iters", "cudagraph"):
        header = next(text for text in stdout.splitlines() if text.startswith("# nThread"))
        shown = {"nthreads": "nThread", "ngpus": "nGpus", "agg_iters": "agg iters:"}
        key = shown.get(long, "graph:")
        assert re.search(rf"{key} {value}\b", header), header


def test_g1_t1_run_as_nccl_tests_defaults_say_nothing(tmp_path, capsys):
    out = tmp_path / "r.csv"
    args = ["--backend", "cpu", "--nodes", "2", "-b", "8", "-e", "128", "-f", "2", "-g", "1"]
    assert main([*args, "-t", "1", "-n", "2", "-w", "1", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "cannot apply" not in stdout and "recorded" not in stdout
    assert stdout.splitlines()[0].startswith("# nThread 1 nGpus 1 minBytes 8 maxBytes 128 ")
    assert len(table_lines(stdout)) == len(read_csv(out)) == 5


def test_report_cputime_names_the_time_columns(tmp_path, capsys):
    assert main([*SMALL, "-C", "1", "--out", str(tmp_path / "r.csv")]) == 0
    stdout = capsys.readouterr().out
    (names,) = [line for line in stdout.splitlines() if line.startswith("#       size")]
    assert names.split()[6:11:4] == ["cputime", "cputime"]  # "#", size ... out, in


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-z", "4"], "-z/--blocking must be 0, 1, 2 or 3"),
        (["-p", "2"], "--parallel_init must be 0 or 1"),
        (["-t", "0"], "-t/--nthreads must be >= 1"),
        (["-g", "x"], "-g/--ngpus 'x' is not a whole number"),
        (["--out-of-place", "2"], "--out-of-place must be 0 or 1"),
        (["-F", "r.txt"], "must name a .csv file"),
        (["--osu", "-b", "8"], "-b is nccl-tests' flag; under --osu give OSU's"),
        (["--osu", "-i", "many"], "-i/--iterations 'many' is not a whole number"),
    ],
)
def test_bad_parity_flags_are_refused_in_one_line(tmp_path, capsys, args, message):
    out = [] if "-F" in args else ["--out", str(tmp_path / "r.csv")]
    assert main([*args, *out]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "r.csv").exists()


def test_results_file_is_the_csv(tmp_path, capsys):
    out = tmp_path / "nccl.csv"
    assert main([*SMALL, "-F", str(out)]) == 0
    assert [int(r["bytes"]) for r in read_csv(out)] == [64, 128, 256]
    assert json.loads(out.with_suffix(".json").read_text())["config"]["out"] == str(out)
    assert main([*SMALL, "-F", str(out), "--out", str(tmp_path / "other.csv")]) == 2
    assert "not both" in capsys.readouterr().err


def test_average_defaults_to_the_mean_over_ranks_as_nccl_tests():
    assert DEFAULT_AVERAGE == 1
    assert config_of().average == 1 and config_of("-a", "3").average == 3


# -- OSU -----------------------------------------------------------------------------------

OSU_ROW = re.compile(r"^(\d+)\s+([\d.]+)(?:\s+([\d.]+)\s+([\d.]+)\s+(\d+))?\s")


def osu_rows(stdout: str) -> list[re.Match]:
    return [m for m in map(OSU_ROW.match, table_lines(stdout)) if m]


def test_osu_flags_and_table(tmp_path, capsys):
    out = tmp_path / "osu.csv"
    args = ["--osu", "-m", "8:64", "-i", "4", "-x", "1", "--backend", "cpu,numpy-direct"]
    assert main([*args, "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "# Size       Avg Latency(us)  series" in stdout
    assert "# nThread" not in stdout  # OSU's title instead
    rows = read_csv(out)
    assert sorted({int(r["bytes"]) for r in rows}) == [8, 16, 32, 64]  # powers of two
    assert {r["iters"] for r in rows} == {"4"}
    matches = osu_rows(stdout)
    assert len(matches) == len(table_lines(stdout)) == len(rows)
    assert all(m[3] is None for m in matches)  # no -f: size and average only
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["config"]["osu"] == {
        "message_size": "8:64",
        "iterations": 4,
        "warmup": 1,
        "full": False,
    }
    assert document["config"]["warmup"] == 1 and document["config"]["iters"] == 4


def test_osu_full_prints_min_avg_max_and_iterations(tmp_path, capsys):
    out = tmp_path / "osu.csv"
    assert main(["--osu", "-m", "32", "-i", "5", "-x", "0", "-f", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    header = "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations"
    assert header in stdout
    assert "Min = Avg = Max" in stdout  # one process: one rank in OSU's terms
    matches = osu_rows(stdout)
    assert [int(m[1]) for m in matches] == [4, 8, 16, 32]  # OSU's smallest, one float
    for m in matches:
        low, mean, high = float(m[3]), float(m[2]), float(m[4])
        assert low == mean == high > 0 and m[5] == "5"


def test_osu_meanings_only_under_osu(tmp_path):
    # Without --osu, -i stays nccl-tests' step in bytes and -m its aggregation.
    config = config_of("-b", "1K", "-e", "3K", "-i", "1K", "-m", "2")
    assert config.sizes == (1024, 2048, 3072) and config.nccl_flags["agg_iters"] == 2
    osu = config_of("--osu", "-m", "1K:4K", "-i", "7", "-x", "3")
    assert osu.sizes == (1024, 2048, 4096) and (osu.iters, osu.warmup) == (7, 3)


@pytest.mark.parametrize(
    ("sizes", "said"),
    [
        ("4:1", "-m/--message-size '4:1': MIN (4) is larger than MAX (1)"),
        ("2M:", "-m/--message-size '2M:': MIN (2M) is larger than MAX (1M)"),
        ("4:x", "-m/--message-size '4:x': cannot parse size 'x'"),
    ],
)
def test_osu_message_sizes_are_refused_naming_m_not_b_and_e(tmp_path, capsys, sizes, said):
    """OSU's -m becomes the sweep's -b/-e: an error found there named flags never given."""
    out = str(tmp_path / "r.csv")
    assert main(["--osu", "-m", sizes, "--backend", "cpu", "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err
    assert "-b/" not in err and "-e/" not in err


MPIRUN = shutil.which("mpirun")


@pytest.mark.mpi
@pytest.mark.skipif(
    MPIRUN is None or importlib.util.find_spec("mpi4py") is None,
    reason="needs mpirun (apt-get install openmpi-bin) and mpi4py (pip install '.[mpi]')",
)
def test_osu_full_over_mpi_ranks(tmp_path):
    from test_bench_mpi import mpirun

    out = tmp_path / "osu.csv"
    args = ["--backend", "mpi-allreduce", "--osu", "-m", "64:1K", "-i", "6", "-x", "1", "-f"]
    done = mpirun(2, *args, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "separate send and receive buffers: MPI's own MPI_Allreduce(send, recv)" in done.stdout
    rows = read_csv(out)
    matches = osu_rows(done.stdout)
    assert (
        [int(m[1]) for m in matches] == [int(r["bytes"]) for r in rows] == [64, 128, 256, 512, 1024]
    )
    for m, row in zip(matches, rows, strict=True):
        low, mean, high = float(m[3]), float(m[2]), float(m[4])
        assert 0 < low <= mean <= high
        # osu_allreduce reduces out of place: the figures are the out-of-place calls'.
        assert mean == pytest.approx(float(row["oop_rank_mean_us_avg"]), rel=1e-5, abs=0.006)
        assert low == pytest.approx(float(row["oop_rank_mean_us_min"]), rel=1e-5, abs=0.006)
