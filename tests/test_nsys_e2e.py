"""End to end with the real nsys: profile a tiny CPU run, export, parse, count ranges."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
from test_bench import SMALL_CEILINGS_ENV

from ring.nsys import calls_by_nodes, detect_nsys, read_tables

NSYS = detect_nsys()
pytestmark = [
    pytest.mark.slow,  # tests/tiers.py: profiles under Nsight Systems
    pytest.mark.skipif(NSYS is None, reason="nsys not installed (sudo sh scripts/install_nsys.sh)"),
    # Profiles under nsys, each launch allowed 300 s.
    pytest.mark.timeout(1200),
]

# (collective, nodes, calls); N = 1 emits no range at all.
RUNS = [
    ("allreduce", 2, 3),
    ("allreduce", 4, 2),
    ("reduce_scatter", 3, 1),
    ("all_gather", 3, 2),
    ("allreduce", 1, 1),
]
PHASES = {
    "allreduce": ("reduce_scatter", "all_gather"),
    "reduce_scatter": ("reduce_scatter",),
    "all_gather": ("all_gather",),
}

PROGRAM = textwrap.dedent(
    f"""
    import numpy as np
    import ring

    rng = np.random.default_rng(1)
    for collective, nodes, calls in {RUNS!r}:
        for _ in range(calls):
            buffers = [rng.random(1001) + 1 for _ in range(nodes)]
            expected = np.sum(buffers, axis=0)
            getattr(ring, collective)(buffers)
            if collective == "allreduce":
                for buffer in buffers:
                    np.testing.assert_allclose(buffer, expected)
    """
)


def expected_ranges() -> dict[str, int]:
    counts: dict[str, int] = {}
    for collective, nodes, calls in RUNS:
        if nodes == 1:
            continue
        name = f"ring:{collective}"
        counts[name] = counts.get(name, 0) + calls
        for phase in PHASES[collective]:
            for step in range(nodes - 1):
                for node in range(nodes):
                    name = f"ring:{phase} step {step} node {node}"
                    counts[name] = counts.get(name, 0) + calls
    return counts


def test_profile_stats_tables_summary(tmp_path):
    root = tmp_path / "profiles"
    done = subprocess.run(
        [sys.executable, "-m", "ring.nsys", "profile", "--name", "e2e", "--root", str(root),
         "--", sys.executable, "-c", PROGRAM],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    folder = root / "e2e"
    assert (folder / "e2e.nsys-rep").is_file()
    stats = sorted(path.name for path in (folder / "stats").iterdir())
    names = {"2022": "nvtxsum", "2023": "nvtx_sum"}[NSYS.generation]
    assert f"e2e_{names}.csv" in stats
    assert "e2e_ring_waits.csv" in stats
    tables = read_tables(folder / "tables")
    ring_rows = [row for row in tables["nvtx_ranges"] if row["domain"] == "ring"]
    got = {row["range"]: row["count"] for row in ring_rows}
    nvtx_version = importlib.metadata.version("nvtx")
    assert got, (
        f"no ring NVTX range came back (nvtx {nvtx_version}; nsys {NSYS.version} records "
        "ranges only with nvtx >=0.2.10,<0.2.12)"
    )
    assert got == expected_ranges()
    assert all(row["kind"] in ("call", "step") for row in ring_rows)
    assert all(row["wait_ns"] is not None for row in ring_rows)
    steps = [row for row in ring_rows if row["kind"] == "step"]
    assert calls_by_nodes(steps, "reduce_scatter") == {2: 3, 3: 1, 4: 2}
    assert calls_by_nodes(steps, "all_gather") == {2: 3, 3: 2, 4: 2}
    assert tables["osrt"], "the OS runtime trace is empty"
    assert not tables["kernels"] and not tables["memops"]  # a CPU run: no GPU reports
    summary = (folder / "summary.md").read_text()
    assert summary.startswith("# Nsight Systems profile e2e\n")
    assert "| reduce_scatter | 3 | 1 | 2 | 6 |" in summary
    assert "| all_gather | 3 | 2 | 2 | 6 |" in summary


@pytest.mark.skipif(
    importlib.util.find_spec("ring.bench") is None, reason="ring.bench is not there yet"
)
def test_profile_of_the_bench_cpu_target(tmp_path):
    # The shape of the workflow's CPU profile target: the bench at two sizes, N = 2 and 4.
    warmup, iters, sizes = 1, 3, ("4K", "8K")
    bench = [
        sys.executable, "-m", "ring.bench", "--backend", "cpu", "--sync", "pairwise",
        "--nodes", "2,4", "-b", sizes[0], "-e", sizes[-1], "-f", "2", "-w", str(warmup),
        "-n", str(iters), "--out-of-place", "0", "--out", str(tmp_path / "bench.csv"),
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "ring.nsys", "profile", "--name", "cpu", "--root",
         str(tmp_path / "profiles"), "--", *bench],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **SMALL_CEILINGS_ENV},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    tables = read_tables(tmp_path / "profiles" / "cpu" / "tables")
    calls = len(sizes) * (warmup + iters)  # per node count
    steps = [row for row in tables["nvtx_ranges"] if row["kind"] == "step"]
    assert calls_by_nodes(steps, "reduce_scatter") == {2: calls, 4: calls}
    assert calls_by_nodes(steps, "all_gather") == {2: calls, 4: calls}
    (outer,) = [row for row in tables["nvtx_ranges"] if row["kind"] == "call"]
    assert (outer["phase"], outer["count"]) == ("allreduce", 2 * calls)
