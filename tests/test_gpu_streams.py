"""Several CUDA streams per node (``streams=``, :mod:`ring.gpu.hazards`), on the CUDA
simulator of ``fakecuda``.

The simulator advances streams in a random order and honours only stream order and
event waits, so results equal to the float64 reference mean the derived waits cover every
hazard; the trace of what was queued where shows which work may overlap; and dropping any
one of the derived waits must make some interleaving give a wrong element.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakecuda import FakeCuda, fake_cupy
from reference import check, random_inputs
from test_gpu_algorithms import (
    PLACEMENTS,
    check_all_gather,
    check_reduce_scatter,
    has,
    options_of,
    upload,
)

from ring.gpu import GpuCommunicator, cache_key
from ring.gpu.hazards import stream_schedule
from ring.gpu.run import streams_for
from ring.schedule import ALGORITHMS, plan, plan_for

# Every algorithm on the simulated GPU (fakecuda): an end-to-end sweep, full suite only.
pytestmark = pytest.mark.slow


def _forced(nodes: int, algorithm: str, **options) -> GpuCommunicator:
    """One shared device, every received range copied as between GPUs, no graphs: the
    trace shows each move's copy and kernel as the host queued them."""
    return GpuCommunicator(
        nodes,
        shared_devices=True,
        force_peer_copies=True,
        graphs=False,
        algorithm=algorithm,
        **options,
    )


def _fill(buffers, inputs) -> None:
    for buf, x in zip(buffers, inputs, strict=True):
        buf.host()[...] = x


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_on_several_streams_matches_the_reference(algorithm, placement):
    devices, options = PLACEMENTS[placement]
    rng = np.random.default_rng(len(algorithm) + len(placement))
    for nodes in (2, 3, 5, 6):
        # random bursts, and for odd N the adversary that starves low-ranked streams
        sim = FakeCuda(min(devices, nodes), seed=nodes, priority=bool(nodes % 2))
        with fake_cupy(sim):
            for streams in (2, 3):
                for extra in options_of(algorithm, nodes):
                    comm = GpuCommunicator(
                        nodes, algorithm=algorithm, streams=streams, **extra, **options
                    )
                    for count in (1, nodes + 1, 97):
                        op = "avg" if count == 97 else "sum"
                        inputs = random_inputs(rng, nodes, count, np.float64, op)
                        buffers = upload(sim, comm, inputs)
                        for _ in range(2):  # eager, then captured and replayed
                            _fill(buffers, inputs)
                            comm.allreduce(buffers, op)
                            for buf in buffers:
                                check(sim.to_host(buf), inputs, op)
                    comm.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_reduce_scatter_and_all_gather_on_several_streams(algorithm):
    rng = np.random.default_rng(17)
    nodes, count = 4, 61
    sim = FakeCuda(1, seed=2)
    with fake_cupy(sim):
        comm = _forced(nodes, "ring", streams=2)
        inputs = random_inputs(rng, nodes, count, np.int32, "sum")
        if has(algorithm, "reduce_scatter"):
            check_reduce_scatter(sim, comm, inputs, "sum", algorithm)
        check_all_gather(sim, comm, inputs, algorithm)


def test_streams_default_and_bad_values():
    assert streams_for("ring-segmented", None) == 2
    assert streams_for("ring", None) == streams_for("rabenseifner", None) == 1
    assert streams_for("ring", 3) == 3
    assert cache_key(2, streams=2) != cache_key(2)
    for bad, error in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="streams"):
            cache_key(2, streams=bad)
        with fake_cupy(FakeCuda(2)), pytest.raises(error, match="streams"):
            GpuCommunicator(2, streams=bad)


# -- what may overlap: the trace of queued work ------------------------------------------------


def _happens_before(trace) -> list[int]:
    """Per traced op, the bit set of the ops that must finish before it starts (stream
    order and event waits; the trace's order is one the host queued them in)."""
    before: list[int] = []
    last: dict[int, int] = {}
    records: dict[tuple[int, int], int] = {}
    for k, (stream, op) in enumerate(trace):
        bits = 0
        if id(stream) in last:
            j = last[id(stream)]
            bits |= before[j] | (1 << j)
        if op[0] == "wait":
            j = records.get((id(op[1]), op[2]))
            if j is not None:
                bits |= before[j] | (1 << j)
        elif op[0] == "record":
            records[(id(op[1]), op[2])] = k
        before.append(bits)
        last[id(stream)] = k
    return before


def _block_work(comm, steps, buffers, trace):
    """{(node, block): ([copy ops], [reduction ops])} of the trace, by the plan's ranges."""
    n = comm.nodes
    block_of = {
        (i, m.src[0]): step.number // (n - 1)
        for i in range(n)
        for step in steps.node_steps(i)
        for m in step.moves
    }
    node_of = {id(s): i for i, row in enumerate(comm.stream_rows) for s in row}
    itemsize = buffers[0].dtype.itemsize

    def locate(ptr):
        for i, buf in enumerate(buffers):
            if buf.data.ptr <= ptr < buf.data.ptr + buf.nbytes:
                return i, (ptr - buf.data.ptr) // itemsize
        return None

    work: dict[tuple[int, int], tuple[list, list]] = {}
    for k, (stream, op) in enumerate(trace):
        if op[0] != "run" or len(op) < 3:
            continue
        kind, dst, src = op[2][0], op[2][1], op[2][2]
        if kind == "copy":
            _, element = locate(src)
            node = node_of[id(stream)]
            work.setdefault((node, block_of[(node, element)]), ([], []))[0].append(k)
        else:
            node, element = locate(dst)
            work.setdefault((node, block_of[(node, element)]), ([], []))[1].append(k)
    return work


def _overlapping_pairs(streams: int) -> tuple[int, int]:
    """(pairs of (copy of block k + 1, reduction of block k) on one node, those that no
    wait orders either way and that run on different streams)."""
    nodes, count, segment_bytes = 4, 4 * 64, 64 * 8
    sim = FakeCuda(1, seed=1)
    with fake_cupy(sim):
        comm = _forced(nodes, "ring-segmented", segment_bytes=segment_bytes, streams=streams)
        inputs = random_inputs(np.random.default_rng(0), nodes, count, np.float64, "sum")
        buffers = upload(sim, comm, inputs)
        sim.trace = []
        comm.allreduce(buffers, "sum")
        trace, sim.trace = sim.trace, None
        for buf in buffers:
            check(sim.to_host(buf), inputs, "sum")
    steps = plan("allreduce", nodes, count, "ring-segmented", segment_bytes // 8)
    assert steps.blocks == 4
    before = _happens_before(trace)
    work = _block_work(comm, steps, buffers, trace)
    pairs = free = 0
    for (node, block), (copies, _) in work.items():
        if block == 0:
            continue
        assert copies, "force_peer_copies: every accumulated range is copied first"
        for c in copies:
            for r in work[(node, block - 1)][1]:
                pairs += 1
                ordered = (before[c] >> r) & 1 or (before[r] >> c) & 1
                free += not ordered and trace[c][0] is not trace[r][0]
    return pairs, free


def test_copies_of_the_next_block_overlap_the_reductions_of_this_one():
    pairs, free = _overlapping_pairs(2)
    assert pairs > 0 and free == pairs
    # One stream per node orders every such pair: the check can fail.
    pairs, free = _overlapping_pairs(1)
    assert pairs > 0 and free == 0


# -- every derived wait is needed --------------------------------------------------------------


def _run_dropping(wait: int | None, seed: int, algorithm: str, options: dict) -> list | bool:
    """Run one allreduce on the simulator's adversary (a random strict priority of the
    streams), dropping the ``wait``-th wait_event; the indices of the waits on move events
    (``wait=None``), or whether the result was right."""
    nodes, count = 3, 36
    sim = FakeCuda(1, seed=seed, drop_wait=wait, priority=True)
    with fake_cupy(sim):
        extra = {k: v for k, v in options.items() if k != "joins"}
        comm = _forced(nodes, algorithm, streams=2, **extra)
        inputs = random_inputs(np.random.default_rng(seed), nodes, count, np.float64, "sum")
        buffers = upload(sim, comm, inputs)
        start = len(sim.waits)
        comm.allreduce(buffers, "sum")
        if wait is None:
            # the waits of the moves, then the joins at the end (which a capture needs even
            # where they are implied, so not every one of them is needed for the result)
            derived = {id(e) for row in comm.move_events for e in row}
            waits = [start + k for k, (_, e) in enumerate(sim.waits[start:]) if id(e) in derived]
            steps = plan_for("allreduce", nodes, count, 8, algorithm, comm.algorithm_choice)
            joins = len(stream_schedule(steps, 2).joins)
            return waits if options.get("joins") else waits[: len(waits) - joins]
        try:
            for buf in buffers:
                check(sim.to_host(buf), inputs, "sum")
        except AssertionError:
            return False
        return True


@pytest.mark.parametrize(
    ("algorithm", "options"),
    [
        ("ring-segmented", {"segment_bytes": 5 * 8, "joins": True}),
        ("ring", {}),
        ("ring-bidirectional", {}),
        ("rabenseifner", {}),
        ("recursive-doubling", {}),
        ("hierarchical", {}),
        ("direct", {}),
    ],
)
def test_dropping_any_one_derived_wait_is_caught(algorithm, options):
    """Some stream priority gives a wrong element for every single wait of the move
    schedule that is left out (for ring-segmented every join of a stream's last move
    too): none is redundant, and the simulator would catch a schedule that missed one."""
    waits = _run_dropping(None, 0, algorithm, options)
    assert waits
    for wait in waits:
        assert any(not _run_dropping(wait, seed, algorithm, options) for seed in range(40)), (
            f"dropping wait {wait} of {algorithm} went unnoticed"
        )


def test_schedule_is_derived_from_the_ranges_not_the_algorithm():
    """ring-segmented's blocks alternate streams with no wait between blocks; the plain ring
    is one chain and stays on one stream."""
    steps = plan("allreduce", 3, 30, "ring-segmented", 10)
    schedule = stream_schedule(steps, 2)
    per_block = 2 * (3 - 1)
    for op in schedule.ops:
        assert op.stream == (op.step // per_block) % 2
        for peer, event in op.waits:
            producer = next(o for o in schedule.ops if o.node == peer and o.record == event)
            assert producer.step // per_block == op.step // per_block
    ring = stream_schedule(plan("allreduce", 3, 30), 2)
    assert {op.stream for op in ring.ops} == {0}
    assert all(s == 0 for _, s in ring.forks)


def test_ring_segmented_block_by_default_fits_the_devices_l2(monkeypatch):
    """No segment_bytes: streams * (N + 1) blocks in flight fit the smallest L2 the devices
    report; a device that reports none gets the schedule's default; a given one wins."""
    import ring.gpu.communicator

    seen = []
    original = ring.gpu.communicator.plan_for

    def recording(*args):
        seen.append(args[-1].get("segment_bytes"))
        return original(*args)

    monkeypatch.setattr(ring.gpu.communicator, "plan_for", recording)
    rng = np.random.default_rng(8)
    for l2, streams, options, expected in (
        (8 * 240, None, {}, 8 * 240 // (2 * 4)),
        (8 * 240, 3, {}, 8 * 240 // (3 * 4)),
        (0, None, {}, None),
        (8 * 240, None, {"segment_bytes": 16}, 16),
    ):
        sim = FakeCuda(1, seed=1, l2_bytes=l2)
        with fake_cupy(sim):
            comm = GpuCommunicator(
                3, shared_devices=True, algorithm="ring-segmented", streams=streams, **options
            )
            inputs = random_inputs(rng, 3, 360, np.float64, "sum")
            buffers = upload(sim, comm, inputs)
            comm.allreduce(buffers, "sum")
            for buf in buffers:
                check(sim.to_host(buf), inputs, "sum")
        assert seen[-1] == expected
