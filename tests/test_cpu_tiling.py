"""Steps that reduce several peers into one range run tile by tile (ring.cpu.crew): the
grouping, and results equal to the independent reference with tiles that split ranges at
odd places."""

from __future__ import annotations

import numpy as np
import pytest
from reference import check, random_inputs

import ring
from ring.host.moves import Tiled, tiled_moves
from ring.schedule import ALGORITHMS, plan
from ring.schedule.steps import Move, Step


def _step(node, *moves):
    return Step("direct", "reduce_scatter", 0, node, tuple(moves), (), ())


def test_direct_reduce_step_is_one_tiled_run_of_every_peer_in_plan_order():
    steps = plan("allreduce", 4, 1000, "direct").node_steps(1)
    reduce, gather = (tiled_moves(s) for s in steps)
    assert reduce == (
        Tiled((500, 750), False, ((2, 500, False), (3, 500, False), (0, 500, False)), True),
    )
    assert gather == steps[1].moves  # copies: nothing to tile


def test_moves_that_read_the_target_or_follow_its_completion_are_not_grouped():
    own = Move(1, (0, 4), (0, 4), True)  # node 1 reading its own range
    first, second = Move(0, (0, 4), (0, 4), True), Move(2, (0, 4), (0, 4), True, completes=True)
    assert tiled_moves(_step(1, first, own)) == (first, own)
    after = Move(3, (0, 4), (0, 4), True)
    assert tiled_moves(_step(1, first, second, after))[1:] == (after,)
    scratch = Move(1, (0, 4), (0, 4), True, from_scratch=True, to_scratch=True)
    assert (
        tiled_moves(_step(1, Move(0, (0, 4), (0, 4), True, to_scratch=True), scratch))[1] == scratch
    )
    other = Move(2, (4, 8), (4, 8), True)
    assert tiled_moves(_step(1, first, other)) == (first, other)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_no_ring_family_step_and_only_direct_and_reduce_broadcast_are_tiled(algorithm):
    tiled = {
        type(a) is Tiled
        for n in (2, 3, 4, 5, 8)
        for i in range(n)
        for s in plan("allreduce", n, 1001, algorithm).node_steps(i)
        for a in tiled_moves(s)
    }
    # Only they reduce several peers into one range in one step.
    many = ("direct", "reduce-broadcast")
    assert tiled == ({False, True} if algorithm in many else {False})


@pytest.mark.parametrize(
    ("dtype", "op"),
    [(np.float64, "sum"), (np.float32, "avg"), (np.int32, "avg"), (np.int64, "max")],
)
@pytest.mark.parametrize("nodes", [2, 3, 5])
def test_tiles_that_split_chunks_at_odd_places_match_the_reference(monkeypatch, dtype, op, nodes):
    itemsize = np.dtype(dtype).itemsize
    monkeypatch.setattr("ring.host.positions.tile_bytes", lambda: 7 * itemsize)
    rng = np.random.default_rng(nodes)
    for count in (1, 6, 7, 8, 101, 1000):
        inputs = random_inputs(rng, nodes, count, dtype, op)
        buffers = [a.copy() for a in inputs]
        # The worker threads with either sync, and the calling thread (inline).
        for sync, inline_bytes in (("pairwise", 0), ("barrier", 0), ("pairwise", 1 << 20)):
            buffers = [a.copy() for a in inputs]
            ring.allreduce(buffers, op, algorithm="direct", sync=sync, inline_bytes=inline_bytes)
            for buf in buffers:
                check(buf, inputs, op)
