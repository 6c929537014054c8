"""Every algorithm of the GPU backend, on the CUDA simulator of ``fakecuda``.

The simulator advances streams in a random order and honours only stream order and event
waits, so a step that waits for too little shows up as a wrong element.  Each algorithm
runs on one shared device (kernels read peers in place), on one device per node (peer
copies into the landing area) and with ``force_peer_copies``; with CUDA graphs (the
second call on the same buffers replays a capture) and without.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakecuda import FakeCuda, fake_cupy
from reference import check, ops_for, random_inputs

import ring
import ring.api
import ring.communicator
from ring import owned_chunk
from ring.gpu import GpuCommunicator
from ring.schedule import ALGORITHMS, check_algorithm, chunk_range

# Every algorithm on the simulated GPU (fakecuda): an end-to-end sweep, full suite only.
pytestmark = pytest.mark.slow

PLACEMENTS = {  # name: (devices of the simulator, GpuCommunicator options)
    "shared": (1, {"shared_devices": True}),
    "separate": (8, {}),
    "forced": (1, {"shared_devices": True, "force_peer_copies": True}),
}
DTYPES = [np.int8, np.uint32, np.float16, np.float32, np.float64, np.complex64]


def has(algorithm: str, collective: str) -> bool:
    try:
        check_algorithm(algorithm, collective)
    except ValueError:
        return False
    return True


def options_of(algorithm: str, nodes: int) -> list[dict]:
    if algorithm == "ring-segmented":
        return [{"segment_bytes": 64}, {}]  # many blocks, and the default
    if algorithm == "hierarchical":
        return [{"group_size": g} for g in range(1, nodes + 1) if nodes % g == 0]
    return [{}]


def upload(sim, comm, inputs):
    return [sim.to_device(x, comm.devices[i]) for i, x in enumerate(inputs)]


def check_reduce_scatter(sim, comm, inputs, op, algorithm: str) -> None:
    """reduce_scatter by ``algorithm``: each node's own chunk is the reduction."""
    count, nodes = inputs[0].size, comm.nodes
    buffers = upload(sim, comm, inputs)
    comm._collective("reduce_scatter", buffers, op, algorithm=algorithm)
    for i, buf in enumerate(buffers):
        a, b = chunk_range(count, nodes, owned_chunk(i, nodes))
        check(sim.to_host(buf)[a:b], [x[a:b] for x in inputs], op)


def check_all_gather(sim, comm, inputs, algorithm: str) -> None:
    """all_gather by ``algorithm``: every node ends with every node's own chunk."""
    count, nodes = inputs[0].size, comm.nodes
    buffers = upload(sim, comm, inputs)
    comm._collective("all_gather", buffers, None, algorithm=algorithm)
    for buf in buffers:
        for i, x in enumerate(inputs):
            a, b = chunk_range(count, nodes, owned_chunk(i, nodes))
            np.testing.assert_array_equal(sim.to_host(buf)[a:b], x[a:b])


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_every_node_count_and_length(algorithm, placement):
    devices, options = PLACEMENTS[placement]
    rng = np.random.default_rng(len(algorithm))
    for nodes in range(1, 9):
        sim = FakeCuda(min(devices, nodes), seed=nodes)
        with fake_cupy(sim):
            for extra in options_of(algorithm, nodes):
                comm = GpuCommunicator(nodes, algorithm=algorithm, **extra, **options)
                assert comm.graphs.enabled
                for count in sorted({0, 1, max(nodes - 1, 1), nodes + 1, 13, 97}):
                    inputs = random_inputs(rng, nodes, count, np.float64, "sum")
                    buffers = upload(sim, comm, inputs)
                    for _ in range(2):  # the second call replays the captured graph
                        for buf, x in zip(buffers, inputs, strict=True):
                            buf.host()[...] = x
                        comm.allreduce(buffers, "sum")
                        for buf in buffers:
                            check(sim.to_host(buf), inputs, "sum")
                comm.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_dtype_op_and_collective(algorithm):
    rng = np.random.default_rng(5)
    nodes, count = 5, 103
    for placement, (devices, options) in PLACEMENTS.items():
        sim = FakeCuda(min(devices, nodes), seed=3)
        with fake_cupy(sim):
            comm = GpuCommunicator(nodes, graphs=placement != "shared", **options)
            for dtype in DTYPES:
                for op in ops_for(dtype):
                    inputs = random_inputs(rng, nodes, count, dtype, op)
                    buffers = upload(sim, comm, inputs)
                    comm._collective("allreduce", buffers, op, algorithm=algorithm)
                    for buf in buffers:
                        check(sim.to_host(buf), inputs, op)
                    if has(algorithm, "reduce_scatter"):
                        check_reduce_scatter(sim, comm, inputs, op, algorithm)
                if has(algorithm, "all_gather"):
                    check_all_gather(sim, comm, inputs, algorithm)


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "ring"])
def test_dropping_the_waits_is_caught(algorithm):
    """The same checks fail when every wait_event is dropped: the tests above can fail."""
    rng = np.random.default_rng(1)
    failures = 0
    for seed in range(20):
        sim = FakeCuda(1, seed=seed, drop_waits=True)
        with fake_cupy(sim):
            comm = GpuCommunicator(4, shared_devices=True, algorithm=algorithm)
            inputs = random_inputs(rng, 4, 64, np.float64, "sum")
            buffers = upload(sim, comm, inputs)
            comm.allreduce(buffers, "sum")
            try:
                for buf in buffers:
                    check(sim.to_host(buf), inputs, "sum")
            except AssertionError:
                failures += 1
    assert failures > 0


def test_public_api_and_bad_algorithm():
    sim = FakeCuda(2, seed=0)
    rng = np.random.default_rng(2)
    with fake_cupy(sim):
        inputs = random_inputs(rng, 2, 11, np.float32, "max")
        buffers = [sim.to_device(x, i) for i, x in enumerate(inputs)]
        try:
            ring.allreduce(buffers, "max", backend="gpu", algorithm="recursive-doubling")
            for buf in buffers:
                check(sim.to_host(buf), inputs, "max")
            before = [sim.to_host(b).copy() for b in buffers]
            with pytest.raises(ValueError, match="unknown algorithm 'nope'"):
                ring.allreduce(buffers, backend="gpu", algorithm="nope")
            with pytest.raises(ValueError, match="has no reduce_scatter"):
                ring.reduce_scatter(buffers, backend="gpu", algorithm="recursive-doubling")
            with pytest.raises(ValueError, match="group_size 3 does not divide 2"):
                GpuCommunicator(2, algorithm="hierarchical", group_size=3)
            for buf, old in zip(buffers, before, strict=True):
                np.testing.assert_array_equal(sim.to_host(buf), old)
        finally:
            # The API's cache must not hand this simulator's communicator to other tests.
            ring.communicator.registered("gpu").close()
