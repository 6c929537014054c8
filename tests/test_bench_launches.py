"""The screen-and-confirm method: ``finalists`` picks from a screen, ``--select`` measures
only the picks (and every peer), ``--order`` alternates the visiting order, and ``launches``
runs one run several times as separate processes, complete or not at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bench import (  # noqa: F401 - autouse
    SMALL_CEILINGS_ENV,
    TINY,
    bench,
    outside_mpirun,
    read_rows,
    small_ceilings,
)

import ring.bench.point
from ring.bench.__main__ import main
from ring.bench.launches import order_of
from ring.bench.schema import LAUNCH, SCHEMA
from ring.bench.selection import choose_finalists, is_peer

ROOT = Path(__file__).resolve().parent.parent
SCREEN = ["--backend", "cpu,numpy-direct", "--algorithm", "ring,direct,reduce-broadcast"]


def _row(algorithm, nbytes, time_us, executor="nodes", backend="cpu"):
    return {
        "backend": backend,
        "sync": "pairwise" if backend == "cpu" else "none",
        "algorithm": algorithm if backend == "cpu" else backend,
        "executor": executor if backend == "cpu" else "",
        "nodes": "2",
        "dtype": "float32",
        "op": "sum",
        "bytes": str(nbytes),
        "time_us": str(time_us),
    }


def test_each_size_picks_its_fastest_and_keeps_its_near_ties():
    rows = [
        _row("ring", 1024, 10.0),
        _row("direct", 1024, 5.0),
        _row("reduce-broadcast", 1024, 5.1),  # within 5 % of direct: a contender
        _row("ring", 4096, 7.0),
        _row("direct", 4096, 9.0),
        _row("reduce-broadcast", 4096, 20.0),
        _row("numpy-direct", 1024, 4.0, backend="numpy-direct"),
        _row("numpy-direct", 4096, 4.0, backend="numpy-direct"),
    ]
    chosen = choose_finalists(rows, within=0.05, most=4)
    picks = {int(p["bytes"]): p["pick"]["algorithm"] for p in chosen["picks"]}
    assert picks == {1024: "direct", 4096: "ring"}
    contenders = {
        int(p["bytes"]): [c["algorithm"] for c in p["contenders"]] for p in chosen["picks"]
    }
    assert contenders == {1024: ["reduce-broadcast"], 4096: []}
    ours = [s["algorithm"] for s in chosen["series"] if not is_peer(s)]
    assert ours == ["direct", "ring", "reduce-broadcast"]
    assert [s["backend"] for s in chosen["series"] if is_peer(s)] == ["numpy-direct"]


def test_every_pick_is_kept_past_the_cap_but_contenders_are_not():
    rows = [_row(a, 1024 * 4**i, 1.0 + (a != b)) for i, b in enumerate(["ring", "direct"])
            for a in ("ring", "direct", "reduce-broadcast")]  # fmt: skip
    rows.append(_row("reduce-broadcast", 1024, 1.01))  # a near tie at the first size
    chosen = choose_finalists(rows, within=0.05, most=1)
    assert [s["algorithm"] for s in chosen["series"]] == ["ring", "direct"]


def test_select_measures_the_finalists_and_every_peer_in_the_flags_order(tmp_path, monkeypatch):
    code, screen = bench(tmp_path, *SCREEN, "--executor", "nodes,slices", name="screen.csv")
    assert code == 0
    finalists = tmp_path / "finalists.json"
    assert main(["finalists", str(screen), "--out", str(finalists), "--most", "1"]) == 0
    document = json.loads(finalists.read_text())
    assert document["kind"] == "finalists" and document["schema"] == SCHEMA
    ours = [s for s in document["series"] if not is_peer(s)]
    visits = []
    time = ring.bench.point.Point.time

    def recording(self, calls, warm=False):
        visits.append(self.series.label)
        time(self, calls, warm)

    monkeypatch.setattr(ring.bench.point.Point, "time", recording)
    args = [*SCREEN, "--executor", "nodes,slices", "--select", str(finalists), "--rounds", "3"]
    code, out = bench(tmp_path, *args, "--order", "reverse", name="confirm.csv")
    assert code == 0
    _, rows = read_rows(out)
    measured = {(r["backend"], r["algorithm"], r["executor"]) for r in rows}
    expected = {(s["backend"], s["algorithm"], s["executor"]) for s in document["series"]}
    assert measured == expected and len(expected) == len(ours) + 1
    first = visits[: len(expected)]
    assert first[0].startswith("numpy-direct")  # reversed: the peer, listed last, goes first
    assert json.loads(out.with_suffix(".json").read_text())["config"]["order"] == "reverse"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{", "not JSON"),
        ('{"kind": "launches", "schema": 2}', "not a finalists file"),
        ('{"kind": "finalists", "schema": 1, "series": []}', "schema 1"),
        ('{"kind": "finalists", "schema": 2, "series": []}', "empty or malformed"),
        ('{"kind": "finalists", "schema": 2, "series": [{"backend": "cpu"}]}', "malformed"),
        (
            '{"kind": "finalists", "schema": 2, "picks": [{"bytes": 4}], "series": '
            '[{"backend": "cpu", "sync": "pairwise", "algorithm": "ring"}]}',
            "picks are malformed",
        ),
    ],
)
def test_a_bad_selection_is_refused_in_one_line_before_anything_runs(
    tmp_path, capsys, content, says
):
    path = tmp_path / "f.json"
    path.write_text(content)
    code, out = bench(tmp_path, *SCREEN, "--select", str(path))
    assert code == 2 and not out.exists()
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_a_selection_of_none_of_the_runs_series_is_refused(tmp_path, capsys):
    path = tmp_path / "f.json"
    other = {"backend": "cpu", "sync": "barrier", "algorithm": "rabenseifner"}
    document = {"kind": "finalists", "schema": 2, "series": [other], "picks": []}
    path.write_text(json.dumps(document))
    code, out = bench(tmp_path, *SCREEN, "--select", str(path))
    assert code == 2 and not out.exists()
    assert "names none of the series of ours" in capsys.readouterr().err


def test_order_takes_forward_or_reverse(tmp_path, capsys):
    code, _ = bench(tmp_path, *SCREEN, "--order", "sideways")
    assert code == 2 and "--order must be one of forward, reverse" in capsys.readouterr().err


def test_launches_alternate_their_order():
    assert [order_of(k) for k in (1, 2, 3, 4, 5)] == ["forward", "reverse"] * 2 + ["forward"]


def _launches(tmp_path: Path, *flags: str, count: int = 3) -> subprocess.CompletedProcess:
    out = tmp_path / "set.csv"
    argv = [sys.executable, "-m", "ring.bench", "launches", "--launches", str(count)]
    argv += ["--out", str(out), "--", *TINY, *flags]
    env = {**os.environ, **SMALL_CEILINGS_ENV}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_launch_set_holds_every_launchs_rows_calls_and_document(tmp_path):
    done = _launches(tmp_path, *SCREEN, "--rounds", "2")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "set.csv"
    columns, rows = read_rows(out)
    assert columns[0] == LAUNCH
    single = read_rows(tmp_path / "set.launches" / "launch1.csv")[1]
    assert sorted({r[LAUNCH] for r in rows}) == ["1", "2", "3"]
    assert len(rows) == 3 * len(single)
    calls = read_rows(out.with_suffix(".samples.csv"))[1]
    assert sorted({c[LAUNCH] for c in calls}) == ["1", "2", "3"]
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["kind"] == "launches" and document["schema"] == SCHEMA
    launches = document["launches"]
    assert [(e["launch"], e["order"]) for e in launches] == [
        (1, "forward"),
        (2, "reverse"),
        (3, "forward"),
    ]
    assert all(e["json"]["config"]["order"] == e["order"] for e in launches)
    assert all("ceilings" in e["json"] and "start_time" in e["json"] for e in launches)


def test_a_failed_launch_ends_the_set_with_no_result(tmp_path):
    # A backend that cannot run: every launch would fail; the first ends the set.
    done = _launches(tmp_path, "--backend", "cpu", "--nodes", "0")
    assert done.returncode == 2
    assert "launch 1 of 3 failed (exit 2)" in done.stderr
    assert not (tmp_path / "set.csv").exists() and not (tmp_path / "set.json").exists()


def test_a_confirmation_set_measures_the_finalists_and_keeps_their_picks(tmp_path):
    code, screen = bench(tmp_path, *SCREEN, name="screen.csv")
    finalists = tmp_path / "finalists.json"
    assert code == 0 and main(["finalists", str(screen), "--out", str(finalists)]) == 0
    out = tmp_path / "set.csv"
    argv = [sys.executable, "-m", "ring.bench", "launches", "--launches", "2"]
    argv += ["--finalists", str(finalists), "--out", str(out), "--", *TINY, *SCREEN]
    env = {**os.environ, **SMALL_CEILINGS_ENV}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["finalists"] == json.loads(finalists.read_text())
    measured = {r["algorithm"] for r in read_rows(out)[1]}
    assert measured == {s["algorithm"] for s in document["finalists"]["series"]}


@pytest.mark.parametrize("flag", ["--out", "--order", "-F", "--select"])
def test_flags_the_set_sets_itself_are_refused(tmp_path, capsys, flag):
    argv = ["launches", "--out", str(tmp_path / "s.csv"), "--", "--backend", "cpu", flag, "x"]
    assert main(argv) == 2
    assert f"{flag} is set per launch" in capsys.readouterr().err
