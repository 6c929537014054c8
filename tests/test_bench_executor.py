"""``--executor``: the cpu backend's executors measured as series, and what rows say."""

from __future__ import annotations

import os

import pytest
from test_bench import bench, outside_mpirun, read_rows, small_ceilings  # noqa: F401 - autouse


def test_each_executor_is_a_series_with_its_column(tmp_path, monkeypatch):
    monkeypatch.setattr("ring.cpu.communicator._cores", lambda: 2)
    args = ["--backend", "cpu", "--executor", "nodes,slices", "--nodes", "4"]
    code, out = bench(tmp_path, *args, "--inline-bytes", "0", "-c", "1")
    assert code == 0
    header, rows = read_rows(out)
    assert "executor" in header
    assert {r["executor"] for r in rows} == {"nodes", "slices"}
    assert all(r["wrong"] == "0" for r in rows)
    for r in rows:
        # inline_bytes=0: nodes runs 4 threads on 2 cores; slices at most one per core,
        # one per whole tile (the smallest sizes are one tile: the caller alone).
        per_core = float(r["threads_per_core"])
        if r["executor"] == "nodes":
            assert per_core == pytest.approx(4 / len(_cores()))
        else:
            assert per_core <= 2 / len(_cores())
            assert r["pinned"] == "false"
        # The ring's traffic formula counts the node threads' bytes: slices rows claim none.
        assert (r["traffic_GBps"] == "") == (r["executor"] == "slices")
    # Every timed call says which series it belongs to: without the column the two
    # executors' calls of one algorithm, N and size could not be told apart.
    _, calls = read_rows(out.with_suffix(".samples.csv"))
    iters = {(r["executor"], r["bytes"]): int(r["iters"]) for r in rows}
    counted: dict = {}
    for call in calls:
        key = (call["executor"], call["bytes"])
        counted[key] = counted.get(key, 0) + 1
    assert counted == iters


def _cores():
    return os.sched_getaffinity(0)


def test_a_bad_executor_is_refused_before_any_run(tmp_path, capsys):
    code, out = bench(tmp_path, "--backend", "cpu", "--executor", "nodes,threads")
    assert code != 0 and not out.exists()
    assert "--executor: unknown executor 'threads'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("backend", "flag", "owner"),
    [("numpy-direct", "--executor", "cpu"), ("cpu", "--graphs", "gpu")],
)
def test_a_flag_of_a_backend_the_run_does_not_measure_is_refused(
    tmp_path, capsys, backend, flag, owner
):
    code, out = bench(tmp_path, "--backend", backend, flag, "0")
    assert code != 0 and not out.exists()
    err = capsys.readouterr().err
    assert f"{flag} is a flag of backend {owner}" in err and "does not measure" in err
