"""The GPU's side of a profile (ring.nsys.gputrace), from nsys' trace reports.

The fixtures (``tests/fixtures/nsys/gputrace2022``, ``gputrace2023``; provenance in their
README) hold a 4-node ring on one device and a 2-node ring over two devices.  Every
expected number is computed here from the fixture CSV files with the ``csv`` module.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from ring.nsys import write_tables
from ring.nsys.gputrace import GpuTraceError, read_trace
from ring.nsys.tables import read_tables
from ring.nsys.tool import NsysInfo, stats_command

FIXTURES = Path(__file__).parent / "fixtures" / "nsys"
NAMES = {
    "2022": ("gputrace", "nvtxgpuproj"),
    "2023": ("cuda_gpu_trace", "nvtx_gpu_proj_trace"),
}


def rows(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module", params=["2022", "2023"])
def generation(request, tmp_path_factory):
    folder = FIXTURES / f"gputrace{request.param}"
    out = tmp_path_factory.mktemp(f"tables{request.param}")
    write_tables(sorted(folder.glob("*.csv")), out)
    return request.param, folder, read_tables(out)


def projections(folder: Path, prefix: str, generation: str) -> list[dict]:
    return rows(folder / f"{prefix}_{NAMES[generation][1]}.csv")


def test_transfers_per_call_by_kind_and_n(generation):
    gen, folder, tables = generation
    expected = {}
    for prefix in ("shared4", "peer2"):
        calls = [r for r in projections(folder, prefix, gen) if r["Name"] == "ring:allreduce"]
        starts = [int(c["Projected Start (ns)"]) for c in calls]
        windows = [
            (a, a + int(c["Projected Duration (ns)"])) for a, c in zip(starts, calls, strict=True)
        ]
        for op in rows(folder / f"{prefix}_{NAMES[gen][0]}.csv"):
            start = int(op["Start (ns)"])
            if "memcpy" in op["Name"] and any(a <= start < b for a, b in windows):
                key = (
                    prefix,
                    "peer_to_peer" if "P" in op["Name"].split()[-1] else "device_to_device",
                )
                expected[key] = expected.get(key, 0) + 1 / len(calls)
    got = {(r["profile"], r["kind"]): r["per_call"] for r in tables["gpu_transfers"]}
    assert got == pytest.approx(expected)
    # N (N - 1) per copying phase: all-gather only on one device, both phases between two.
    assert got[("shared4", "device_to_device")] == 4 * 3
    assert got[("peer2", "peer_to_peer")] == 2 * 2 * 1
    # The four restore copies before each call are not the ring's.
    assert {r["nodes"] for r in tables["gpu_transfers"]} == {2, 4}


def test_step_device_time_and_gap_come_from_the_projection(generation):
    gen, folder, tables = generation
    ranges = projections(folder, "shared4", gen)
    by_name: dict[str, list[int]] = {}
    for r in ranges:
        by_name.setdefault(r["Name"], []).append(int(r["Projected Duration (ns)"]))
    steps = {
        (r["phase"], r["step"], r["node"]): r
        for r in tables["gpu_steps"]
        if r["profile"] == "shared4"
    }
    assert len(steps) == 2 * 3 * 4
    for (phase, step, node), row in steps.items():
        durations = by_name[f"ring:{phase} step {step} node {node}"]
        assert row["count"] == len(durations) == 2
        assert row["device_median_ns"] == round(statistics.median(durations))
        assert row["ops"] == 1  # a kernel in reduce-scatter, a copy in all-gather
    # Node 2's first step waits for the call's first operation (node 0's kernel) to begin.
    call = {
        r["RangeId"]: int(r["Projected Start (ns)"])
        for r in ranges
        if r["Name"] == "ring:allreduce"
    }
    gaps = [
        int(r["Projected Start (ns)"]) - call[r["ParentId"]]
        for r in ranges
        if r["Name"] == "ring:reduce_scatter step 0 node 2"
    ]
    assert steps[("reduce_scatter", 0, 2)]["gap_median_ns"] == round(statistics.median(gaps))
    assert steps[("reduce_scatter", 0, 0)]["gap_median_ns"] == 0


def test_streams_busy_and_idle(generation):
    gen, folder, tables = generation
    streams = {r["stream"]: r for r in tables["gpu_streams"] if r["profile"] == "shared4"}
    assert set(streams) == {"14", "15", "16", "17"}  # the restores' stream 7 is outside calls
    trace = rows(folder / f"shared4_{NAMES[gen][0]}.csv")
    for stream, row in streams.items():
        mine = [op for op in trace if op["Strm"] == stream]
        assert row["busy_ns"] == sum(int(op["Duration (ns)"]) for op in mine)
        assert (row["kernels"], row["copies"]) == (6, 6)
        assert row["idle_ns"] > row["busy_ns"]  # host-bound: the device mostly waits


def test_both_generations_give_the_same_tables(tmp_path):
    out = {}
    for gen in NAMES:
        write_tables(sorted((FIXTURES / f"gputrace{gen}").glob("*.csv")), tmp_path / gen)
        out[gen] = read_tables(tmp_path / gen)
    for name in ("gpu_steps", "gpu_transfers", "gpu_streams"):
        assert out["2022"][name] == out["2023"][name] != []


def test_a_trace_without_its_columns_names_the_file(tmp_path):
    bad = tmp_path / "x_cuda_gpu_trace.csv"
    bad.write_text("Start (ns),Name\n1,k\n")
    with pytest.raises(GpuTraceError, match=r"x_cuda_gpu_trace\.csv: no column"):
        read_trace(bad)
    assert read_trace(tmp_path / "absent_cuda_gpu_trace.csv") == []


@pytest.mark.parametrize(("gen", "names"), list(NAMES.items()))
def test_stats_asks_for_the_trace_reports(gen, names):
    info = NsysInfo(path="nsys", version=f"{gen}.1", generation=gen, reports=())
    argv = stats_command("r.nsys-rep", "p", info)
    listed = argv[argv.index("--report") + 1].split(",")
    assert set(names) <= set(listed)


def test_gpu_summary_shows_device_steps_and_no_host_wait_share(generation, tmp_path):
    from ring.nsys.summary import write_summary

    _, folder, _ = generation
    tables = tmp_path / "tables"
    write_tables(sorted(folder.glob("*.csv")), tables)
    text = write_summary(tables, tmp_path / "summary.md").read_text()
    assert "### Steps on the device (GPU trace)" in text
    assert "| 4 | device_to_device | 2 | 24 | 12.00 |" in text
    assert "so no host wait share is shown" in text
    assert "wait share |" not in text.split("## Profile `peer2`")[1]


def test_the_h200_profile_shows_no_wait_share_in_summary_or_report(tmp_path):
    from ring.nsys.summary import write_summary
    from ring.report.derive.profiles import step_and_wait_tables
    from ring.report.load import load_profile

    h200 = Path(__file__).parent.parent / "results/reference/nvidia-h200/profiles/4gpu"
    text = write_summary(h200 / "tables", tmp_path / "summary.md").read_text()
    assert "GPU trace reports were not given" in text
    assert "Wait share over all steps" not in text
    steps, waits = step_and_wait_tables([load_profile(h200)])
    assert steps is not None and waits is None
