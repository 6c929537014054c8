"""ring-segmented's blocks are independent ring passes: a block's first step waits for no
one, and the CPU backend's pairwise tokens still balance (every token put is taken within
the call, so none is left for the next)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from reference import check, random_inputs

from ring import CpuCommunicator
from ring.cpu.crew import program
from ring.nvtx import node_pushers
from ring.schedule import ALGORITHM_COLLECTIVES, ALGORITHMS, plan


@pytest.fixture(autouse=True)
def _threaded(monkeypatch):
    """These tests cover the worker threads: no call runs inline unless it asks
    (tests/test_cpu_inline.py covers the calling thread)."""
    monkeypatch.setattr("ring.cpu.checks.INLINE_BYTES", 0)


@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("nodes", [2, 3, 4, 7])
def test_a_blocks_first_step_waits_for_no_one(collective, nodes):
    steps = plan(collective, nodes, 100, "ring-segmented", segment=9)
    period = steps.steps // steps.blocks
    assert steps.blocks > 3
    for i in range(nodes):
        left = ((i - 1) % nodes,)
        expected = ([()] + [left] * (period - 1)) * steps.blocks
        assert [s.waits for s in steps.node_steps(i)] == expected


def _cases():
    for algorithm in ALGORITHMS:
        for collective in ALGORITHM_COLLECTIVES[algorithm]:
            for nodes in (2, 3, 4, 5, 8):
                segment = 7 if algorithm == "ring-segmented" else 0
                yield plan(collective, nodes, 97, algorithm, segment)


@pytest.mark.parametrize("steps", list(_cases()), ids=str)
def test_every_token_put_is_taken_in_the_same_call(steps):
    n = steps.nodes
    nodes = program(steps, node_pushers(n), True, {})
    if nodes[0].gets is None:
        return  # runs with the barrier
    taken, put = Counter(), Counter()
    for node in nodes:
        for t in range(steps.steps):
            taken.update(id(q) for q in node.gets[t])
            put.update(id(q) for q in node.puts[t] if t < steps.steps - 1)
    assert taken == put


@pytest.mark.parametrize("nodes", [2, 3, 4, 5])
def test_repeated_segmented_calls_match_the_reference(nodes):
    rng = np.random.default_rng(nodes)
    with CpuCommunicator(nodes, algorithm="ring-segmented", segment_bytes=24) as comm:
        for count in (1, 50, 333, 50):
            inputs = random_inputs(rng, nodes, count, np.float64, "sum")
            buffers = [a.copy() for a in inputs]
            comm.allreduce(buffers, "sum")
            for buf in buffers:
                check(buf, inputs, "sum")
