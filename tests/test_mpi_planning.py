"""Every planning input of ``algorithm="auto"`` under ``mpirun``: ranks that disagree about
it (the algorithm, ``planning=``, the budget) or whose rank 0 cannot plan raise the same
error on every rank, at every size, before any data moves; wisdom files that cannot be used
leave every rank's calls running and right.  A hang fails the launch's timeout
(``test_mpi.mpirun``)."""

from __future__ import annotations

import pytest
from test_mpi import (  # noqa: F401 - pytestmark: the same skip marks
    LAUNCH_TIMEOUT,
    assert_same_error_on_every_rank,
    json_lines,
    mpirun,
    pytestmark,
)

# (exception type, what the message says) per scenario; a scenario runs at every size.
EXPECTED = {
    "auto on rank 0": (
        "ValueError",
        "algorithms differ between ranks (rank 0: 'auto', rank 1: 'ring'",
    ),
    "planning differs": (
        "ValueError",
        "auto plans differently on the ranks "
        "(rank 0: planning='measure', rank 1: planning='estimate'",
    ),
    "budget bad on rank 1": (
        "ValueError",
        "bad input on rank 1: RING_PLAN_BUDGET='-1': give the seconds",
    ),
    "budgets differ": (
        "ValueError",
        "RING_PLAN_BUDGET differs between ranks (rank 0: 1 s, rank 1: 2 s",
    ),
    "rank 0 cannot plan": ("OSError", "planning failed on rank 0: the wisdom disk is gone"),
    "a tuple on rank 0": (
        "ValueError",
        "(rank 0: planning='measure' on a call it does not measure (not [one NumPy array]), "
        "rank 1: planning='measure'",
    ),
}
COUNTS = (8, 2000, 20000)


@pytest.fixture(scope="module", params=[2, 3])
def report(request, tmp_path_factory):
    nodes = request.param
    folder = tmp_path_factory.mktemp(f"wisdom-{nodes}")
    code, out, err, _ = mpirun(nodes, "planning_agree.py", str(folder))
    assert code == 0, err
    (result,) = json_lines(out)
    assert result["nodes"] == nodes
    return result


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT)
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_a_planning_disagreement_raises_the_same_error_on_every_rank(report, scenario, count):
    seen = report["scenarios"][f"{scenario} {count}"]
    assert_same_error_on_every_rank(seen, report["nodes"], *EXPECTED[scenario])


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT)
@pytest.mark.parametrize("case", ["deep on rank 0", "deep on rank 1", "bogus on rank 0"])
def test_wisdom_that_cannot_be_used_is_warned_about_and_every_call_runs(report, case):
    """Rank 0 warns about its file; the other ranks never read theirs (rank 0's wisdom is
    every rank's)."""
    owner = int(case[-1])
    assert report["wisdom"][case] == [[True, r == owner == 0] for r in range(report["nodes"])]


@pytest.mark.timeout(2 * LAUNCH_TIMEOUT)
def test_every_rank_still_runs_calls_after_the_disagreements(report):
    assert report["after"] == [True] * report["nodes"]
