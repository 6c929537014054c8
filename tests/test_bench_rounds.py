"""``--rounds``: each size's timed calls split into rounds that visit every series in turn."""

from __future__ import annotations

import csv
import itertools

import pytest
from test_bench import TINY, bench, outside_mpirun, small_ceilings  # noqa: F401 - autouse

import ring.bench.point
import ring.bench.runner
from ring.bench.__main__ import main
from ring.bench.backends.base import HostSession
from ring.bench.point import round_shares
from ring.bench.results import samples_path


@pytest.mark.parametrize(
    ("iters", "rounds", "shares"),
    [(6, 3, [2, 2, 2]), (7, 3, [3, 2, 2]), (5, 1, [5]), (4, 4, [1, 1, 1, 1])],
)
def test_calls_are_split_as_evenly_as_they_go(iters, rounds, shares):
    assert round_shares(iters, rounds) == shares and sum(shares) == iters


def test_rounds_visit_every_series_before_the_next_round(tmp_path, monkeypatch):
    visits = []
    time = ring.bench.point.Point.time

    def recording(self, calls, warm=False):
        visits.append((self.series.label, self.count, calls, warm))
        time(self, calls, warm)

    monkeypatch.setattr(ring.bench.point.Point, "time", recording)
    args = ["--backend", "cpu,numpy-direct", "--algorithm", "ring,direct", "-n", "5"]
    code, out = bench(tmp_path, *args, "--rounds", "2", "-c", "1")
    assert code == 0
    labels = ["cpu/pairwise/ring/N2", "cpu/pairwise/direct/N2", "numpy-direct/N2"]
    first_size = [v for v in visits if v[1] == visits[0][1]]
    assert [v[0] for v in first_size] == labels + labels
    assert [(v[2], v[3]) for v in first_size] == [(3, False)] * 3 + [(2, True)] * 3
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert rows and all(r["wrong"] == "0" and r["iters"] == "5" for r in rows)
    with open(samples_path(out), newline="") as handle:
        calls = list(csv.DictReader(handle))
    assert len(calls) == 5 * len(rows)


def test_each_series_warms_up_just_before_its_first_timed_calls(tmp_path, monkeypatch):
    # With rounds, every series of a size is loaded first; warming each up there would
    # leave the others' loads and warm-ups between its warm-up and its first timed call.
    calls = []
    untimed, timed = HostSession.call, HostSession.timed_call

    def call(self):
        calls.append((id(self), "untimed"))
        untimed(self)

    def timed_call(self):
        calls.append((id(self), "timed"))
        timed(self)

    monkeypatch.setattr(HostSession, "call", call)
    monkeypatch.setattr(HostSession, "timed_call", timed_call)
    args = ["--backend", "cpu,numpy-direct", "-b", "1K", "-e", "1K", "-w", "2", "-n", "6"]
    assert main([*args, "--rounds", "3", "--out", str(tmp_path / "r.csv")]) == 0
    runs = [(key, len(list(group))) for key, group in itertools.groupby(calls)]
    first, second = runs[0][0][0], runs[2][0][0]
    assert first != second
    # Each round's 2 calls out of place, then 2 in place: 4 timed calls back to back.
    round_one = [(first, "untimed", 2), (first, "timed", 4), (second, "untimed", 2)]
    round_one.append((second, "timed", 4))
    later = [(first, "untimed", 1), (first, "timed", 4), (second, "untimed", 1)]
    later.append((second, "timed", 4))
    assert [(*key, n) for key, n in runs] == round_one + later + later


def test_one_round_keeps_each_series_calls_back_to_back(tmp_path, monkeypatch):
    visits = []
    time = ring.bench.point.Point.time

    def recording(self, calls, warm=False):
        visits.append((self.series.label, calls, warm))
        time(self, calls, warm)

    monkeypatch.setattr(ring.bench.point.Point, "time", recording)
    assert bench(tmp_path, "--backend", "cpu,numpy-direct", "-n", "4")[0] == 0
    assert visits[:2] == [("cpu/pairwise/ring/N2", 4, False), ("numpy-direct/N2", 4, False)]


@pytest.mark.parametrize(
    ("value", "message"),
    [("0", "--rounds must be >= 1"), ("x", "is not a whole number"), ("4", "more than the 3")],
)
def test_a_bad_rounds_is_refused_before_anything_runs(tmp_path, capsys, value, message):
    assert main([*TINY, "--rounds", value, "--out", str(tmp_path / "r.csv")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.csv").exists()


def test_rounds_count_every_series_buffers_in_the_memory_check(tmp_path, capsys, monkeypatch):
    # Enough for one series' largest point (4 KiB, N = 2), not for four held at once.
    monkeypatch.setattr(ring.bench.runner, "memory_bytes", lambda: 100_000)
    args = ["--backend", "cpu", "--algorithm", "ring,direct", "--nodes", "2,4"]
    assert bench(tmp_path, *args, "--rounds", "3")[0] == 2
    assert "(or drop --rounds)" in capsys.readouterr().err
    assert bench(tmp_path, *args)[0] == 0
