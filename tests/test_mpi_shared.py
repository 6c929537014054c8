"""Calls on :meth:`ring.mpi.MpiRing.shared_buffer` arrays under ``mpirun -n 2..4``
(``tests/mpi_programs/shared.py``): by position on every rank's memory, with no message,
bit for bit the call by messages; refused alike on every rank when the ranks' arrays or
requests differ or a part cannot be made; nothing left behind."""

from __future__ import annotations

import csv
import json

import pytest
from test_mpi import (  # noqa: F401 - pytestmark: the same skip marks
    json_lines,
    mpirun,
    pytestmark,
)

from ring.report import build_report

REFUSED = {
    "one private": ("ValueError", "same shared_buffer allocation, or none may (rank 0: shared"),
    "two allocations": ("ValueError", "rank 0: shared buffer 1, rank 1: shared buffer 2"),
    "counts differ": ("ValueError", "every rank must ask the same (rank 0: 10 x float32"),
    "negative count": ("ValueError", "count must be >= 0, got -1"),
    "object dtype": ("ValueError", "dtype must be a numeric NumPy dtype, got object"),
    "part too large": ("RuntimeError", "making each rank's part failed (rank 1: OSError"),
    "directory unusable": (
        "ValueError",
        "choosing where to make the parts failed (rank 1: ValueError: RING_SHM_DIR=",
    ),
}


@pytest.mark.parametrize("nodes", [2, 3, 4])
def test_calls_on_shared_buffers(nodes):
    code, out, err, _ = mpirun(nodes, "shared.py", timeout=300)
    (result,) = json_lines(out)
    reports = result["reports"]
    assert [r["nodes"] for r in reports] == [nodes] * nodes, err
    for report in reports:
        assert report["cases"] > 100
        assert report["failures"] == [], "\n".join(report["failures"])
        assert report["messages"] == 0  # not one point-to-point message on shared arrays
        assert report["left"] == []
        assert report["chosen"] == [nodes, 0]  # every part made in RING_SHM_DIR, none left
        assert report["after_close"] and report["forgotten"]
        assert report["refusals"].pop("works after")
        for scenario, (kind, text) in REFUSED.items():
            got_kind, message, untouched = report["refusals"][scenario]
            assert (got_kind, untouched) == (kind, True), (scenario, message)
            assert text in message, (scenario, message)
            assert message == reports[0]["refusals"][scenario][1]  # the same on every rank
    assert code == 0, err


def test_bench_measures_host_and_shared_buffers_as_series(tmp_path):
    """``--buffers host,shared``: each kind a series of both MPI backends, validated, in
    the column ``buffers``; the shared rows' traffic is not modelled."""
    out = tmp_path / "shared.csv"
    args = ["--backend", "mpi,mpi-allreduce", "--buffers", "host,shared", "--algorithm", "ring"]
    sizes = ["-b", "4", "-e", "300K", "-f", "77", "-n", "3", "-w", "1", "-c", "1"]
    code, printed, err, _ = mpirun(3, "-m", "ring.bench", *args, *sizes, "--out", str(out))
    assert code == 0, err
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    series = {(r["backend"], r["buffers"]) for r in rows}
    assert series == {(b, k) for b in ("mpi", "mpi-allreduce") for k in ("host", "shared")}
    assert sorted({int(r["bytes"]) for r in rows}) == [4, 308, 23716]
    for row in rows:
        assert row["wrong"] == "0", row
        ring_host = row["backend"] == "mpi" and row["buffers"] == "host"
        assert (row["traffic_GBps"] != "") == ring_host, row
    # The report says where the shared buffers lived, from the run's JSON.
    pages = json.loads(out.with_suffix(".json").read_text())["environment"]["huge_pages"]
    built = build_report([out], figures_dir=tmp_path / "figures", out_dir=tmp_path / "report")
    caveats = built.markdown.read_text().split("## How this was measured")[1].split("## ")[0]
    kind = "not a tmpfs" if pages["on_directory"] is None else f"huge={pages['on_directory']}"
    assert f"maps ({out.stem}: {pages['directory']}, " in caveats
    assert kind in caveats
    assert f"# shared buffers' parts in {pages['directory']} (" in printed  # and the log
