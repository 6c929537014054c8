"""The MPI backend's check of every call, in band or in its own exchange
(:mod:`ring.mpi.exchange`): a call that differs on one rank in op, dtype, length or
algorithm raises the same error on every rank, leaves every buffer as it was and hangs
nothing, on the first call of a shape and on a repeated (bound) call alike; and every
correct call around it matches a float64 reference (one launch per N:
``tests/mpi_programs/inband_mismatch.py``).
"""

from __future__ import annotations

import json

import pytest
from test_mpi import mpirun, pytestmark  # noqa: F401 - pytestmark: the same skip marks

LAUNCH_TIMEOUT = 120


@pytest.mark.timeout(LAUNCH_TIMEOUT + 30)
@pytest.mark.parametrize("nodes", [1, 2, 3, 4])
def test_a_differing_call_raises_alike_and_leaves_buffers(nodes):
    code, out, err, _ = mpirun(nodes, "inband_mismatch.py", timeout=LAUNCH_TIMEOUT)
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["nodes"] == nodes
    cases = result["cases"]
    assert all(ok for *_, ok in cases.pop("evicted"))
    assert len(cases) == 4 * 3 * 3 * 2
    for name, seen in cases.items():
        assert len(seen) == nodes, name
        assert all(correct for *_, correct in seen), f"{name}: a correct call went wrong"
        if nodes == 1:  # one rank differs from nobody
            assert {s[0] for s in seen} == {"no error"}, name
            continue
        assert len({(kind, text) for kind, text, *_ in seen}) == 1, f"{name}: {seen}"
        kind, text, *_ = seen[0]
        assert kind in ("ValueError", "TypeError"), f"{name}: {seen[0]}"
        assert "do not match, so no data was moved" in text, name
        assert all(untouched for _, _, untouched, _ in seen), f"{name}: a buffer changed"
