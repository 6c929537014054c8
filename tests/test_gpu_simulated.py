"""The GPU backend's own code, run here on the CUDA simulator of ``fakecuda``.

The simulator honours only what CUDA guarantees (stream order, event waits captured at
enqueue time) and otherwise advances streams in a random order, so these tests check the
backend's synchronisation and chunk movement without a GPU.  ``test_gpu_device.py`` runs
the same kinds of checks on a real device.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from fakecuda import FakeCuda, fake_cupy
from reference import check, ops_for, random_inputs

import ring
import ring.api
import ring.communicator
from ring import nvtx, owned_chunk
from ring._optional import MissingDependencyError
from ring.gpu import (
    DeviceUnavailableError,
    GpuCommunicator,
    cache_key,
    make_communicator,
    node_devices,
)
from ring.schedule import chunk_range

# complex and 1-byte dtypes too: CuPy supports every dtype ring.ops accepts but long double
DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.float16, np.float32]
DTYPES += [np.float64, np.complex64, np.complex128]


def _upload(sim, inputs, comm):
    return [sim.to_device(x, comm.devices[i]) for i, x in enumerate(inputs)]


def _allreduce_matches(sim, comm, inputs, op):
    buffers = _upload(sim, inputs, comm)
    comm.allreduce(buffers, op)
    # read what the devices hold the moment the call returns: nothing more may run first
    for buf in buffers:
        check(sim.to_host(buf), inputs, op)


@pytest.mark.parametrize("nodes", range(1, 9))
@pytest.mark.parametrize("devices", [1, 2, 3, 8])
def test_allreduce_on_shared_and_separate_devices(nodes, devices):
    rng = np.random.default_rng(nodes * 10 + devices)
    sim = FakeCuda(devices, seed=nodes)
    with fake_cupy(sim):
        comm = GpuCommunicator(nodes, shared_devices=True)
        assert comm.devices == tuple(i % min(nodes, devices) for i in range(nodes))
        assert comm.shared_devices == (devices < nodes)
        for count in sorted({0, 1, nodes - 1, nodes, 2 * nodes + 1, 97, 1000}):
            inputs = random_inputs(rng, nodes, count, np.float32, "sum")
            _allreduce_matches(sim, comm, inputs, "sum")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_and_op(dtype):
    rng = np.random.default_rng(7)
    for devices, force in ((1, False), (1, True), (3, False)):
        sim = FakeCuda(devices, seed=3)
        with fake_cupy(sim):
            comm = GpuCommunicator(3, shared_devices=True, force_peer_copies=force)
            for op in ops_for(dtype):
                inputs = random_inputs(rng, 3, 101, dtype, op)
                _allreduce_matches(sim, comm, inputs, op)


@pytest.mark.parametrize("devices", [1, 4])
def test_reduce_scatter_and_all_gather(devices):
    rng = np.random.default_rng(11)
    nodes, count = 4, 103
    sim = FakeCuda(devices, seed=5)
    with fake_cupy(sim):
        comm = GpuCommunicator(nodes, shared_devices=True)
        inputs = random_inputs(rng, nodes, count, np.float64, "sum")
        buffers = _upload(sim, inputs, comm)
        comm.reduce_scatter(buffers, "sum")
        for i, buf in enumerate(buffers):
            a, b = chunk_range(count, nodes, owned_chunk(i, nodes))
            check(sim.to_host(buf)[a:b], [x[a:b] for x in inputs], "sum")

        owned = [x.copy() for x in inputs]
        buffers = _upload(sim, owned, comm)
        comm.all_gather(buffers)
        expected = np.empty(count)
        for i in range(nodes):
            a, b = chunk_range(count, nodes, owned_chunk(i, nodes))
            expected[a:b] = inputs[i][a:b]
        for buf in buffers:
            np.testing.assert_array_equal(sim.to_host(buf), expected)


def test_stress_many_sizes_repetitions_and_interleavings():
    """Random sizes, node counts, placements and schedules of the streams: a missing or
    misplaced event wait shows up as a wrong element."""
    rng = np.random.default_rng(2024)
    for trial in range(60):
        nodes = int(rng.integers(2, 9))
        devices = int(rng.integers(1, nodes + 1))
        sim = FakeCuda(devices, seed=trial)
        with fake_cupy(sim):
            comm = GpuCommunicator(
                nodes, shared_devices=True, force_peer_copies=bool(rng.integers(2))
            )
            for _ in range(3):
                count = int(rng.integers(0, 300))
                op = ["sum", "max", "prod"][int(rng.integers(3))]
                inputs = random_inputs(rng, nodes, count, np.float64, op)
                _allreduce_matches(sim, comm, inputs, op)


def test_a_backend_without_its_waits_is_caught():
    """The same checks fail when every wait_event is dropped: the tests above can fail."""
    rng = np.random.default_rng(1)
    failures = 0
    for seed in range(20):
        sim = FakeCuda(1, seed=seed, drop_waits=True)
        with fake_cupy(sim):
            comm = GpuCommunicator(4, shared_devices=True)
            inputs = random_inputs(rng, 4, 64, np.float64, "sum")
            try:
                _allreduce_matches(sim, comm, inputs, "sum")
            except AssertionError:
                failures += 1
    assert failures > 0


def test_each_step_waits_only_on_the_left_neighbours_previous_step():
    nodes = 5
    sim = FakeCuda(1)
    with fake_cupy(sim):
        comm = GpuCommunicator(nodes, shared_devices=True)
        buffers = [sim.to_device(np.ones(50), 0) for _ in range(nodes)]
        waits_before, host_waits_before = len(sim.waits), sim.host_waits
        comm.allreduce(buffers, "sum")
        waits = sim.waits[waits_before:]
        assert sim.host_waits - host_waits_before == 1, "the host must wait exactly once"

    node_of_stream = {id(s): i for i, s in enumerate(comm.first_streams)}
    step_of_event = {
        id(e): (i, t) for i, events in enumerate(comm.step_events) for t, e in enumerate(events)
    }
    step_waits = [
        (node_of_stream[id(s)], step_of_event[id(e)]) for s, e in waits if id(e) in step_of_event
    ]
    steps = 2 * (nodes - 1)
    # Node i waits at steps 1..2(N-1)-1 on (i-1, t-1); node 0's stream also joins every
    # node's last step at the end.
    expected = [(i, ((i - 1) % nodes, t - 1)) for t in range(1, steps) for i in range(nodes)]
    expected += [(0, (i, steps - 1)) for i in range(1, nodes)]
    assert step_waits == expected


def test_nvtx_ranges_name_every_step(monkeypatch):
    pushed = []
    monkeypatch.setattr(nvtx, "pusher", lambda name: lambda: pushed.append(name))
    monkeypatch.setattr(nvtx, "pop", lambda: pushed.append(None))

    class Outer:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            pushed.append(self.name)

        def __exit__(self, *exc):
            pushed.append(None)

    monkeypatch.setattr(nvtx, "annotate", Outer)
    monkeypatch.setattr(nvtx, "_CALL_RANGES", {})  # built anew with the recorder
    sim = FakeCuda(1)
    with fake_cupy(sim):
        comm = GpuCommunicator(3, shared_devices=True)
        comm.allreduce([sim.to_device(np.ones(9), 0) for _ in range(3)], "sum")
    names = [n for n in pushed if n is not None]
    assert names[0] == "allreduce"
    assert all(nvtx.STEP_RANGE.match(n) for n in names[1:])
    assert sorted(names[1:]) == sorted(
        f"{phase} step {s} node {i}"
        for phase in ("reduce_scatter", "all_gather")
        for s in range(2)
        for i in range(3)
    )
    assert pushed.count(None) == len(names), "every range is popped"


@pytest.mark.parametrize("seed", range(20))
def test_caller_stream_work_comes_first_and_timing_is_read_from_events(seed):
    sim = FakeCuda(2, seed=seed)
    with fake_cupy(sim) as cp:
        comm = GpuCommunicator(2)
        buffers = [sim.to_device(np.full(10, 2.0), d) for d in (0, 1)]
        # Work the caller queued on each device's default stream (e.g. what wrote the
        # inputs) must land before the ring reads them.
        for d in (0, 1):
            late = sim.to_device(np.full(10, 5.0 + d), d)
            with cp.cuda.Device(d):
                cp.cuda.runtime.memcpyAsync(buffers[d].data.ptr, late.data.ptr, 80, 3, 0)
        comm.allreduce(buffers, "sum")
        for buf in buffers:
            np.testing.assert_array_equal(sim.to_host(buf), np.full(10, 11.0))
        assert comm.last_elapsed_ms() > 0
        assert sim.current == 0, "the caller's current device is restored"


def test_peer_access_is_enabled_once_and_missing_pairs_are_reported():
    for ensure in (True, False):
        sim = FakeCuda(3, peer=lambda a, b: {a, b} != {0, 2}, ensure=ensure)
        with fake_cupy(sim), pytest.warns(RuntimeWarning, match="0->2, 2->0"):
            comm = GpuCommunicator(3)
        assert comm.pairs_without_peer_access == ((0, 2), (2, 0))
        assert sim.peer_enabled == {(0, 1), (1, 0), (1, 2), (2, 1)}
        with fake_cupy(sim), warnings.catch_warnings():
            warnings.simplefilter("error")
            GpuCommunicator(2)  # already enabled: no error, no warning
        with fake_cupy(sim):
            inputs = random_inputs(np.random.default_rng(0), 3, 31, np.float32, "sum")
            _allreduce_matches(sim, comm, inputs, "sum")


# -- errors, checked before anything is queued -------------------------------------------


def test_without_cupy_the_error_names_the_package_and_the_extra(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "cupy", None)
    with pytest.raises(MissingDependencyError, match=r"cupy.*pip install '\.\[gpu\]'"):
        GpuCommunicator(2)
    with pytest.raises(MissingDependencyError, match="cupy"):
        ring.allreduce([np.ones(3)] * 2, backend="gpu")


def test_import_ring_does_not_import_cupy():
    import subprocess
    import sys

    code = "import sys; sys.modules['cupy'] = None; import ring, ring.gpu; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_without_a_device_the_error_says_so():
    with fake_cupy(FakeCuda(0)), pytest.raises(DeviceUnavailableError, match="no CUDA-capable"):
        GpuCommunicator(2)


def test_too_few_devices_without_shared_devices():
    with (
        fake_cupy(FakeCuda(1)),
        pytest.raises(ValueError, match="2 nodes need 2 CUDA devices but this machine has 1"),
    ):
        GpuCommunicator(2)


def test_node_devices():
    assert node_devices(3, None, False, 4) == (0, 1, 2)
    assert node_devices(4, None, True, 2) == (0, 1, 0, 1)
    assert node_devices(3, [2, 0, 1], False, 3) == (2, 0, 1)
    assert node_devices(5, [1], True, 2) == (1,) * 5
    with pytest.raises(ValueError, match=r"only 2 were given.*shared_devices=True"):
        node_devices(3, [0, 1], False, 4)
    with pytest.raises(ValueError, match=r"device\(s\) \[0\] are listed more than once"):
        node_devices(2, [0, 0], False, 4)
    with pytest.raises(ValueError, match=r"device 4 does not exist.*4 CUDA device"):
        node_devices(1, [4], False, 4)
    with pytest.raises(ValueError, match="3 devices given for 2 nodes"):
        node_devices(2, [0, 1, 2], False, 4)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"sync": "barrier"}, TypeError, "unknown option"),
        ({"devices": "01"}, TypeError, "list of device ids"),
        ({"devices": [0.5]}, TypeError, "integer device ids"),
        ({"devices": [-1]}, ValueError, ">= 0"),
        ({"devices": []}, ValueError, "empty"),
        ({"shared_devices": "yes"}, TypeError, "True or False"),
    ],
)
def test_bad_options(options, error, message):
    with pytest.raises(error, match=message):
        cache_key(2, **options)
    with fake_cupy(FakeCuda(2)), pytest.raises(error, match=message):
        make_communicator(2, **options)


def test_bad_buffers_are_refused_before_anything_is_queued():
    sim = FakeCuda(2)
    with fake_cupy(sim):
        comm = GpuCommunicator(2)
        good = [sim.to_device(np.ones(8), d) for d in (0, 1)]
        wrong_place = [sim.to_device(np.ones(8), 1), sim.to_device(np.ones(8), 1)]
        cases = [
            ([np.ones(8), np.ones(8)], TypeError, "CuPy array"),
            ([good[0]], ValueError, "2 nodes but 1 buffers"),
            (wrong_place, ValueError, "buffers\\[0\\] is on device 1 but node 0 runs on device 0"),
            ([good[0], sim.to_device(np.ones(9), 1)], ValueError, "elements"),
        ]
        for buffers, error, message in cases:
            queued = sum(len(s.queue) for s in sim._queues())
            with pytest.raises(error, match=message):
                comm.allreduce(buffers, "sum")
            assert sum(len(s.queue) for s in sim._queues()) == queued
        with pytest.raises(ValueError, match="unknown op"):
            comm.allreduce(good, "mean")
        comm.close()
        assert comm.closed
        with pytest.raises(ring.CommunicatorClosedError):
            comm.allreduce(good, "sum")


def test_public_api_dispatches_to_the_gpu_backend():
    sim = FakeCuda(1, seed=9)
    rng = np.random.default_rng(3)
    inputs = random_inputs(rng, 3, 40, np.float32, "max")
    with fake_cupy(sim):
        buffers = [sim.to_device(x, 0) for x in inputs]
        with pytest.raises(ValueError, match="shared_devices=True"):
            ring.allreduce(buffers, "max", backend="gpu")
        try:
            ring.allreduce(buffers, "max", backend="gpu", shared_devices=True)
            comm = ring.get_communicator(3, backend="gpu", shared_devices=True)
            assert isinstance(comm, GpuCommunicator)
        finally:
            ring.communicator.registered("gpu").close()
    for buf in buffers:
        check(sim.to_host(buf), inputs, "max")


def test_op_spellings_and_async_calls_on_the_gpu_backend():
    rng = np.random.default_rng(4)
    sim = FakeCuda(2, seed=4)
    with fake_cupy(sim):
        inputs = random_inputs(rng, 3, 37, np.float32, "max")
        comm = GpuCommunicator(3, shared_devices=True)
        buffers = _upload(sim, inputs, comm)
        comm.allreduce(buffers, ring.ReduceOp.MAX)
        for buf in buffers:
            check(sim.to_host(buf), inputs, "max")
        buffers = _upload(sim, inputs, comm)
        work = ring.allreduce(
            buffers, np.maximum, backend="gpu", shared_devices=True, async_op=True
        )
        assert work.wait(timeout=60)
        for buf in buffers:
            check(sim.to_host(buf), inputs, "max")
        ring.communicator.close_all()
