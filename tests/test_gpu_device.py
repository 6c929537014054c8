"""The GPU backend on a real CUDA device (skipped, with the reason, where there is none).

On a single GPU every check runs with ``shared_devices=True`` (nodes round-robin over the
devices there are), both with in-place reads between nodes on one device and with
``force_peer_copies=True``, which sends every chunk through ``cudaMemcpyPeerAsync`` and the
scratch chunk exactly as between two GPUs.  With several GPUs the ring also runs one node
per device.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference import check, ops_for, random_inputs

import ring
from ring import owned_chunk
from ring._optional import MissingDependencyError
from ring.gpu import DeviceUnavailableError, GpuCommunicator
from ring.schedule import chunk_range

try:
    DEVICES = ring.gpu.device_count()
    cp = ring.gpu.import_cupy()
except (MissingDependencyError, DeviceUnavailableError) as exc:
    pytest.skip(f"no GPU to test on: {exc}", allow_module_level=True)

pytestmark = pytest.mark.gpu

DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.float16, np.float32]
DTYPES += [np.float64, np.complex64, np.complex128]
_comms: dict[tuple, GpuCommunicator] = {}


def comm_for(nodes: int, force: bool = False) -> GpuCommunicator:
    key = (nodes, force)
    if key not in _comms:
        _comms[key] = GpuCommunicator(nodes, shared_devices=True, force_peer_copies=force)
    return _comms[key]


def upload(inputs, comm):
    out = []
    for i, values in enumerate(inputs):
        with cp.cuda.Device(comm.devices[i]):
            out.append(cp.asarray(values))
    return out


def download(buffers):
    return [cp.asnumpy(b) for b in buffers]


@pytest.mark.parametrize("force", [False, True], ids=["in-place", "peer-copies"])
@pytest.mark.parametrize("nodes", range(1, 9))
def test_allreduce_uneven_lengths(nodes, force):
    rng = np.random.default_rng(nodes)
    comm = comm_for(nodes, force)
    for count in sorted({0, 1, max(nodes - 1, 1), nodes, 1009, (1 << 20) + 3}):
        inputs = random_inputs(rng, nodes, count, np.float32, "sum")
        buffers = upload(inputs, comm)
        comm.allreduce(buffers, "sum")
        for result in download(buffers):
            check(result, inputs, "sum")


@pytest.mark.parametrize("force", [False, True], ids=["in-place", "peer-copies"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dtypes_and_ops(dtype, force):
    rng = np.random.default_rng(5)
    comm = comm_for(3, force)
    for op in ops_for(dtype):
        inputs = random_inputs(rng, 3, 1001, dtype, op)
        buffers = upload(inputs, comm)
        comm.allreduce(buffers, op)
        for result in download(buffers):
            check(result, inputs, op)


@pytest.mark.parametrize("force", [False, True], ids=["in-place", "peer-copies"])
def test_reduce_scatter_and_all_gather(force):
    rng = np.random.default_rng(8)
    nodes, count = 4, 10_007
    comm = comm_for(nodes, force)
    inputs = random_inputs(rng, nodes, count, np.float64, "sum")
    buffers = upload(inputs, comm)
    comm.reduce_scatter(buffers, "sum")
    for i, result in enumerate(download(buffers)):
        a, b = chunk_range(count, nodes, owned_chunk(i, nodes))
        check(result[a:b], [x[a:b] for x in inputs], "sum")

    buffers = upload(inputs, comm)
    comm.all_gather(buffers)
    expected = np.empty(count)
    for i in range(nodes):
        a, b = chunk_range(count, nodes, owned_chunk(i, nodes))
        expected[a:b] = inputs[i][a:b]
    for result in download(buffers):
        np.testing.assert_array_equal(result, expected)


def test_stress_random_sizes_and_repetitions():
    """Many sizes (large enough for the streams to overlap), node counts and repeated calls
    on the same buffers, with exact integer sums: a missing or misplaced event wait lets a
    node read a chunk before or after the step it belongs to and changes the sum."""
    rng = np.random.default_rng(99)
    for _ in range(120):
        nodes = int(rng.integers(2, 9))
        comm = comm_for(nodes, bool(rng.integers(2)))
        count = int(np.exp(rng.uniform(0, np.log(4 << 20))))
        inputs = [rng.integers(-1000, 1000, size=count, dtype=np.int64) for _ in range(nodes)]
        total = np.sum(inputs, axis=0)
        buffers = upload(inputs, comm)
        repetitions = int(rng.integers(1, 4))
        for _ in range(repetitions):
            comm.allreduce(buffers, "sum")
        expected = total * nodes ** (repetitions - 1)
        for i, result in enumerate(download(buffers)):
            wrong = np.flatnonzero(result != expected)
            assert wrong.size == 0, (
                f"N={nodes} count={count} reps={repetitions} force={comm.force_peer_copies}: "
                f"node {i} has {wrong.size} wrong elements, first at {wrong[0]}"
            )


def test_inputs_written_on_the_callers_stream_are_waited_for():
    """The inputs are still being written by kernels on the caller's (non-blocking) current
    stream when the collective is called: it must start after them."""
    nodes, count = 4, 32 << 20
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-100, 100, size=count).astype(np.float32) for _ in range(nodes)]
    with GpuCommunicator(nodes, devices=[0], shared_devices=True) as comm, cp.cuda.Device(0):
        sources = [cp.asarray(x) for x in inputs]
        buffers = [cp.zeros_like(s) for s in sources]
        cp.cuda.Device(0).synchronize()
        with cp.cuda.Stream(non_blocking=True):
            for buffer, source in zip(buffers, sources, strict=True):
                cp.multiply(source, 1, out=buffer)
            comm.allreduce(buffers, "sum")
    expected = np.sum(inputs, axis=0)
    for result in download(buffers):
        np.testing.assert_array_equal(result, expected)


def test_elapsed_time_comes_from_events():
    comm = comm_for(2)
    buffers = upload([np.ones(1 << 20, np.float32)] * 2, comm)
    comm.allreduce(buffers, "sum")
    assert comm.last_elapsed_ms() > 0


@pytest.mark.skipif(DEVICES < 2, reason="needs two or more GPUs")
def test_one_node_per_device():
    rng = np.random.default_rng(4)
    with GpuCommunicator(DEVICES) as comm:
        assert not comm.shared_devices
        assert isinstance(comm.pairs_without_peer_access, tuple)
        inputs = random_inputs(rng, DEVICES, 123_457, np.float32, "sum")
        buffers = upload(inputs, comm)
        comm.allreduce(buffers, "sum")
        for result in download(buffers):
            check(result, inputs, "sum")
        with pytest.raises(ValueError, match="is on device"):
            comm.allreduce(list(reversed(buffers)), "sum")


def test_too_few_devices_without_shared_devices():
    with pytest.raises(ValueError, match=f"need {DEVICES + 1} CUDA devices but this machine"):
        GpuCommunicator(DEVICES + 1)


def test_public_api():
    rng = np.random.default_rng(6)
    inputs = random_inputs(rng, 3, 1000, np.float32, "max")
    with cp.cuda.Device(0):
        buffers = [cp.asarray(x) for x in inputs]
    ring.allreduce(buffers, "max", backend="gpu", devices=[0], shared_devices=True)
    for result in download(buffers):
        check(result, inputs, "max")


@pytest.mark.parametrize("streams", [2, 3])
@pytest.mark.parametrize("force", [False, True], ids=["in-place", "peer-copies"])
@pytest.mark.parametrize("algorithm", ["ring-segmented", "ring", "rabenseifner"])
def test_several_streams_per_node(algorithm, force, streams):
    """Waits derived from the ranges (ring.gpu.hazards), on the device's own scheduling;
    the second and third calls on the same buffers capture and replay a CUDA graph."""
    rng = np.random.default_rng(streams)
    extra = {"segment_bytes": 64 << 10} if algorithm == "ring-segmented" else {}
    for nodes in (2, 4):
        with GpuCommunicator(
            nodes,
            shared_devices=True,
            force_peer_copies=force,
            algorithm=algorithm,
            streams=streams,
            **extra,
        ) as comm:
            inputs = random_inputs(rng, nodes, (1 << 20) + 7, np.float32, "sum")
            buffers = upload(inputs, comm)
            for _ in range(3):
                for i, (buffer, values) in enumerate(zip(buffers, inputs, strict=True)):
                    with cp.cuda.Device(comm.devices[i]):
                        buffer.set(values)
                comm.allreduce(buffers, "sum")
                for result in download(buffers):
                    check(result, inputs, "sum")
            assert comm.graphs.replays >= 1
