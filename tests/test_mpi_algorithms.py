"""Every algorithm of the MPI backend under ``mpirun -n 2..8``, and the one error every
rank raises when the ranks' algorithms (or their options) are bad or differ.

One launch per N runs every algorithm, option, collective, dtype and op inside
(``tests/mpi_programs/algorithms.py``), so the file stays within a few minutes on two
cores.
"""

from __future__ import annotations

import importlib.util

import pytest
from test_mpi import (  # noqa: F401 - pytestmark: the same skip marks
    assert_same_error_on_every_rank,
    json_lines,
    mpirun,
    pytestmark,
)

LAUNCH_TIMEOUT = 300


@pytest.mark.slow
@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 6, 7, 8])
def test_every_algorithm_matches_reference(nodes):
    large = ("--large",) if nodes == 3 else ()
    code, out, err, _ = mpirun(nodes, "algorithms.py", *large, timeout=LAUNCH_TIMEOUT)
    (result,) = json_lines(out)
    assert result["nodes"] == nodes
    reports = result["reports"]
    assert [r["rank"] for r in reports] == list(range(nodes)), err
    for report in reports:
        assert report["cases"] > 300
        assert report["failures"] == [], "\n".join(report["failures"])
    assert code == 0, err


@pytest.mark.parametrize("nodes, ranges", [(2, "0"), (3, "0"), (2, "1")])
def test_repeated_calls_and_small_direct_calls(nodes, ranges):
    """Kept forms, compiled steps and bound calls never stand in for what changed between
    calls; small ``direct`` and ``reduce-broadcast`` calls send nothing but the pre-flight
    exchange; one-group ``hierarchical`` runs as the ring (tests/mpi_programs/reuse.py).
    With NVTX ranges pushed (``RING_NVTX=1``) a bound gathered call runs step by step in
    its ranges, without them as one list of moves: both are checked."""
    env = {"RING_NVTX": ranges, "NVTX_INJECTION64_PATH": ""}
    code, out, err, _ = mpirun(nodes, "reuse.py", timeout=LAUNCH_TIMEOUT, env=env)
    (result,) = json_lines(out)
    reports = result["reports"]
    assert [r["nodes"] for r in reports] == [nodes] * nodes, err
    for report in reports:
        assert report["cases"] > 100
        assert report["failures"] == [], "\n".join(report["failures"])
        for algorithm in ("direct", "reduce-broadcast"):
            assert report["messages"][f"{algorithm} at the slot"] == 0
            # reduce-broadcast: rank 0 takes and sends N - 1, the others one each way.
            least = 2 * (nodes - 1) if algorithm == "direct" or report["rank"] == 0 else 2
            assert report["messages"][f"{algorithm} above it"] >= least
        one = report["one group"]  # as the ring: segmented receives, its own step names
        assert one["messages"]["hierarchical"] == one["messages"]["ring"] > 2 * (nodes - 1)
        assert one["names"]
        assert report["freed"]
        assert report["unbound"]  # unbind() lets the last buffer go, the ring open
        assert report["dropped"]
        if importlib.util.find_spec("nvtx") is not None:
            assert report["ranges"] == (ranges == "1")
    assert code == 0, err


EXPECTED = {
    "algorithms_differ": ("ValueError", "algorithms differ between ranks"),
    "unknown_everywhere": ("ValueError", "bad input on every rank: unknown algorithm 'nope'"),
    "unknown_on_one_rank": ("ValueError", "bad input on rank 2: unknown algorithm 'nope'"),
    "no_such_collective": ("ValueError", "'recursive-doubling' has no reduce_scatter"),
    "group_sizes_differ": ("ValueError", "group_size differs between ranks"),
    "group_size_not_a_divisor": ("ValueError", "group_size 3 does not divide 4 nodes"),
    "segments_differ": ("ValueError", "segment_bytes differs between ranks"),
    "constructor_algorithms_differ": ("ValueError", "algorithms differ between ranks"),
    # Rank 0's buffer does not fit the pre-flight slot, the others' do.
    "direct_lengths_straddle_the_slot": ("ValueError", "buffer lengths differ between ranks"),
}


@pytest.fixture(scope="module")
def mismatch_report():
    code, out, err, _ = mpirun(4, "algorithm_mismatch.py")
    assert code == 0, err
    (report,) = json_lines(out)
    assert report["nodes"] == 4
    return report


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_bad_algorithm_same_error_on_every_rank(mismatch_report, scenario):
    assert_same_error_on_every_rank(mismatch_report["scenarios"][scenario], 4, *EXPECTED[scenario])


def test_every_algorithm_works_after_the_bad_calls(mismatch_report):
    assert mismatch_report["after"]
