"""GPU calls ordered on the caller's streams (``stream=``, ``async_op=True``), on the CUDA
simulator of ``fakecuda``.

The simulator runs work only when the host synchronises (a little when it queries an
event), in a random order of the ready streams, so: a call the host did not wait for
leaves the buffers untouched and ``sim.host_waits`` unchanged; work the caller queued on
its stream before the call is seen by it only through the call's waits, and work queued
after sees the result only through the caller's stream waiting for the call.  Results are
compared with the float64 NumPy (exact integer) reference on random non-zero data.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakecuda import FakeCuda, fake_cupy
from reference import check, random_inputs

import ring
import ring.api
import ring.communicator
import ring.mpi
from ring import owned_chunk
from ring.gpu import GpuCommunicator, GpuWork, cache_key
from ring.schedule import chunk_range

LENGTHS = (1, 2, 13, 31)  # shorter than N for N > 2, and primes


def _streams(cp, devices) -> list:
    """One new caller stream per node, on the node's device."""
    streams = []
    for d in devices:
        with cp.cuda.Device(d):
            streams.append(cp.cuda.Stream(non_blocking=True))
    return streams


def _copy(cp, dst, src, stream) -> None:
    """``dst = src`` queued on ``stream`` (the caller's work around a call)."""
    cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, dst.nbytes, 3, stream.ptr)


def _expected(name: str, inputs: list, op: str, node: int) -> tuple[slice, list]:
    """The range of node ``node``'s result the collective defines, and the inputs it is
    the reduction (or copy) of there."""
    count, nodes = inputs[0].size, len(inputs)
    if name == "reduce_scatter":
        a, b = chunk_range(count, nodes, owned_chunk(node, nodes))
        return slice(a, b), [x[a:b] for x in inputs]
    return slice(0, count), inputs


def _check(name: str, result: np.ndarray, inputs: list, op: str, node: int) -> None:
    if name == "all_gather":
        expected = np.empty_like(inputs[0])
        for i, x in enumerate(inputs):
            a, b = chunk_range(x.size, len(inputs), owned_chunk(i, len(inputs)))
            expected[a:b] = x[a:b]
        np.testing.assert_array_equal(result, expected)
        return
    part, sources = _expected(name, inputs, op, node)
    check(result[part], sources, op)


def _call(name: str, comm, buffers, op: str, **kwargs):
    if name == "all_gather":
        return comm.all_gather(buffers, **kwargs)
    return getattr(comm, name)(buffers, op, **kwargs)


CASES = [
    # (collective, op, dtype, devices of the simulator or 0 for one per node, options)
    ("allreduce", "sum", np.float64, 0, {}),
    ("allreduce", "avg", np.float32, 1, {"shared_devices": True}),
    ("allreduce", "max", np.int32, 1, {"shared_devices": True, "force_peer_copies": True}),
    ("allreduce", "sum", np.float64, 0, {"algorithm": "ring-segmented", "segment_bytes": 16}),
    ("reduce_scatter", "prod", np.float64, 0, {}),
    ("all_gather", None, np.int64, 1, {"shared_devices": True}),
]


@pytest.mark.parametrize("nodes", [1, 2, 3, 4])
@pytest.mark.parametrize(("name", "op", "dtype", "devices", "options"), CASES)
def test_calls_on_the_callers_streams_are_ordered_by_them(name, op, dtype, devices, options, nodes):
    """Three calls back to back on the caller's streams, the host waiting for none: each
    reads the inputs the caller queued on its streams just before it, and the copies the
    caller queued just after each read that call's result (the events every call reuses,
    and the second call's capture and third call's replay of a graph, included)."""
    rng = np.random.default_rng(nodes * 31 + len(name))
    for count in LENGTHS:
        sim = FakeCuda(devices or nodes, seed=nodes + count)
        with fake_cupy(sim) as cp:
            comm = GpuCommunicator(nodes, **options)
            streams = _streams(cp, comm.devices)
            given = streams[0] if devices == 1 else streams
            buffers = [sim.to_device(np.full(count, 7, dtype), d) for d in comm.devices]
            rounds = []
            waits = sim.host_waits
            for _ in range(3):
                inputs = random_inputs(rng, nodes, count, dtype, op or "sum")
                staged = [sim.to_device(x, d) for x, d in zip(inputs, comm.devices, strict=True)]
                seen = [sim.to_device(np.zeros(count, dtype), d) for d in comm.devices]
                for i in range(nodes):
                    _copy(cp, buffers[i], staged[i], given if devices == 1 else streams[i])
                _call(name, comm, buffers, op, stream=given)
                for i in range(nodes):
                    _copy(cp, seen[i], buffers[i], given if devices == 1 else streams[i])
                rounds.append((inputs, seen))
            assert sim.host_waits == waits, "the host waited for a call given stream="
            assert all((sim.to_host(b) == 7).all() for b in buffers), "nothing ran yet"
            for stream in streams:
                stream.synchronize()
            for inputs, seen in rounds:
                for i, out in enumerate(seen):
                    _check(name, sim.to_host(out), inputs, op, i)
            if nodes > 1 and options.get("algorithm") != "ring-segmented":
                assert comm.graphs.captures == 1 and comm.graphs.replays == 1
            comm.close()


def test_without_the_stream_the_callers_other_stream_is_not_waited_for():
    """The check above can fail: a call ordered on the current stream does not wait for
    inputs written on another stream, and some interleaving reads the old ones."""
    stale = 0
    for seed in range(20):
        sim = FakeCuda(2, seed=seed)
        with fake_cupy(sim) as cp:
            comm = GpuCommunicator(2, graphs=False)
            streams = _streams(cp, comm.devices)
            buffers = [sim.to_device(np.full(8, 1.0), d) for d in comm.devices]
            for i, d in enumerate(comm.devices):
                _copy(cp, buffers[i], sim.to_device(np.full(8, 5.0), d), streams[i])
            comm.allreduce(buffers, "sum")
            stale += not (sim.to_host(buffers[0]) == 10.0).all()
    assert stale > 0


def _queued(sim) -> int:
    return sum(len(s.queue) for s in sim._queues())


def test_bad_streams_are_refused_before_anything_is_queued():
    sim = FakeCuda(2)
    with fake_cupy(sim) as cp:
        comm = GpuCommunicator(2)
        s0, s1 = _streams(cp, comm.devices)
        buffers = [sim.to_device(np.ones(8), d) for d in comm.devices]
        cases = [
            (3, TypeError, "stream must be a CuPy stream"),
            ("s0", TypeError, "stream must be a CuPy stream"),
            ([s0, object()], TypeError, r"stream\[1\] is not a CuPy stream"),
            ([s0], ValueError, "1 streams given for 2 nodes"),
            ([s0, s1, s1], ValueError, "3 streams given for 2 nodes"),
            (s0, ValueError, "stream is on device 0 but node 1 runs on device 1"),
            ([s1, s0], ValueError, r"stream\[0\] is on device 1 but node 0 runs on device 0"),
        ]
        for stream, error, message in cases:
            queued, records = _queued(sim), len(sim.waits)
            with pytest.raises(error, match=message):
                comm.allreduce(buffers, "sum", stream=stream)
            with pytest.raises(error, match=message):
                ring.allreduce(buffers, "sum", backend="gpu", stream=stream, async_op=True)
            assert (_queued(sim), len(sim.waits)) == (queued, records)
        with pytest.raises(TypeError, match=r"option.* of each call on backend 'gpu'"):
            ring.get_communicator(2, backend="gpu", stream=s0)
        ring.communicator.close_all()


@pytest.mark.parametrize("backend", ["cpu", "mpi"])
def test_another_backend_refuses_stream_naming_the_gpu(backend):
    buffers = [np.ones(4), np.ones(4)]
    for async_op in (False, True):
        with pytest.raises(TypeError, match="only backend='gpu' takes it"):
            if backend == "mpi":
                ring.mpi.check_call("allreduce", buffers[:1], "sum", stream=object())
            else:
                ring.allreduce(buffers, backend=backend, stream=object(), async_op=async_op)
    assert (buffers[0] == 1).all() and not ring.work.PENDING.get(backend)


def test_stream_is_per_call_not_cached_nor_remembered():
    sim = FakeCuda(1, seed=3)
    rng = np.random.default_rng(3)
    with fake_cupy(sim) as cp:
        (stream,) = _streams(cp, [0])
        assert cache_key(3, shared_devices=True, stream=stream) == cache_key(3, shared_devices=True)
        inputs = random_inputs(rng, 3, 17, np.float64, "sum")
        buffers = [sim.to_device(x, 0) for x in inputs]
        ring.allreduce(buffers, backend="gpu", shared_devices=True, stream=stream)
        stream.synchronize()
        for buf in buffers:
            check(sim.to_host(buf), inputs, "sum")
        waits = sim.host_waits
        buffers = [sim.to_device(x, 0) for x in inputs]
        ring.allreduce(buffers, backend="gpu", shared_devices=True)  # blocks, as ever
        assert sim.host_waits == waits + 1
        for buf in buffers:
            check(sim.to_host(buf), inputs, "sum")
        assert len(ring.communicator.registered("gpu").communicators()) == 1
        ring.communicator.close_all()


@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("nodes", [1, 2, 3])
def test_async_op_returns_a_handle_on_the_calls_done_event(nodes, given):
    """No thread: the call is queued on the current (or given) streams; the handle says
    it is pending until the device got there, and ``wait()`` makes the host wait for it."""
    rng = np.random.default_rng(nodes)
    sim = FakeCuda(nodes, seed=nodes)
    with fake_cupy(sim) as cp:
        devices = list(range(nodes))
        stream = {"stream": _streams(cp, devices)} if given else {}
        for count in LENGTHS:
            inputs = random_inputs(rng, nodes, count, np.float64, "sum")
            buffers = [sim.to_device(x, d) for d, x in enumerate(inputs)]
            waits = sim.host_waits
            work = ring.allreduce(buffers, backend="gpu", async_op=True, **stream)
            assert isinstance(work, GpuWork) and isinstance(work, ring.work.Work)
            assert sim.host_waits == waits and not ring.work.PENDING.get("gpu")
            if nodes > 1:
                assert not work.is_completed(), "the device has barely started"
            assert work.wait() is True and work.is_completed()
            assert work.exception() is None and repr(work) == "GpuWork(done)"
            for buf in buffers:
                check(sim.to_host(buf), inputs, "sum")
        # wait(timeout): the device works while the host polls
        inputs = random_inputs(rng, nodes, 31, np.float64, "avg")
        buffers = [sim.to_device(x, d) for d, x in enumerate(inputs)]
        work = ring.allreduce(buffers, "avg", backend="gpu", async_op=True, **stream)
        assert work.wait(timeout=60)
        for buf in buffers:
            check(sim.to_host(buf), inputs, "avg")
        ring.communicator.close_all()


@pytest.mark.parametrize("name", ["allreduce", "reduce_scatter", "all_gather"])
def test_async_op_out_of_place_queues_the_copies_on_the_calls_streams(name):
    """``recv=`` with ``async_op``: send stays as it was, recv gets the result, and the
    host waits for neither the copies nor the call until ``wait()``."""
    rng = np.random.default_rng(len(name))
    nodes, count = 3, 29
    sim = FakeCuda(nodes, seed=5)
    with fake_cupy(sim):
        inputs = random_inputs(rng, nodes, count, np.float64, "max")
        send = [sim.to_device(x, d) for d, x in enumerate(inputs)]
        recv = [sim.to_device(np.full(count, -9.0), d) for d in range(nodes)]
        args = () if name == "all_gather" else ("max",)
        waits = sim.host_waits
        work = getattr(ring, name)(send, *args, backend="gpu", recv=recv, async_op=True)
        assert sim.host_waits == waits
        assert all((sim.to_host(r) == -9.0).all() for r in recv), "not even the copies ran"
        work.wait()
        for i, (s, r) in enumerate(zip(send, recv, strict=True)):
            np.testing.assert_array_equal(sim.to_host(s), inputs[i])
            _check(name, sim.to_host(r), inputs, "max", i)
        # out of place without async_op blocks, as before
        recv = [sim.to_device(np.full(count, -9.0), d) for d in range(nodes)]
        assert getattr(ring, name)(send, *args, backend="gpu", recv=recv) is None
        for i, r in enumerate(recv):
            _check(name, sim.to_host(r), inputs, "max", i)
        ring.communicator.close_all()


def test_last_elapsed_ms_after_a_stream_call_waits_for_it():
    sim = FakeCuda(2, seed=1)
    with fake_cupy(sim) as cp:
        comm = GpuCommunicator(2)
        streams = _streams(cp, comm.devices)
        buffers = [sim.to_device(np.ones(40), d) for d in comm.devices]
        waits = sim.host_waits
        comm.allreduce(buffers, "sum", stream=streams)
        assert sim.host_waits == waits
        assert comm.last_elapsed_ms() > 0  # no "not ready" error: it waited
        assert sim.host_waits == waits + 1
        assert comm.last_elapsed_ms() > 0 and sim.host_waits == waits + 1
        assert all((sim.to_host(b) == 2.0).all() for b in buffers)


def test_close_waits_for_the_work_still_queued():
    sim = FakeCuda(2, seed=2)
    with fake_cupy(sim) as cp:
        comm = GpuCommunicator(2)
        internal = [s for row in comm.stream_rows for s in row]
        streams = _streams(cp, comm.devices)
        buffers = [sim.to_device(np.full(40, 3.0), d) for d in comm.devices]
        comm.allreduce(buffers, "sum", stream=streams)
        assert any(s.queue for s in internal)
        comm.close()
        assert not any(s.queue for s in internal)
        assert all((sim.to_host(b) == 6.0).all() for b in buffers)
        for stream in streams:
            stream.synchronize()  # its wait for the call is met: no deadlock


def test_scratch_replaced_while_a_call_is_queued_is_kept_until_it_is_done():
    rng = np.random.default_rng(6)
    sim = FakeCuda(1, seed=6)
    with fake_cupy(sim) as cp:
        comm = GpuCommunicator(3, shared_devices=True, force_peer_copies=True)
        (stream,) = _streams(cp, [0])
        calls = []
        for count in (7, 61, 301):  # each grows the landing areas
            inputs = random_inputs(rng, 3, count, np.float64, "sum")
            buffers = [sim.to_device(x, 0) for x in inputs]
            comm.allreduce(buffers, stream=stream)
            calls.append((inputs, buffers))
        assert comm._retired, "the smaller landing areas stay while calls may use them"
        stream.synchronize()
        for inputs, buffers in calls:
            for buf in buffers:
                check(sim.to_host(buf), inputs, "sum")
        comm.allreduce([sim.to_device(x, 0) for x in calls[0][0]])  # blocking: all done
        assert not comm._retired


@pytest.mark.parametrize("async_op", [False, True])
def test_a_call_that_fails_while_queueing_leaves_everything_usable(monkeypatch, async_op):
    """The failure waits for what was queued and raises; the caller's streams were never
    made to wait for the failed call, and the next call runs and is right."""
    rng = np.random.default_rng(8)
    sim = FakeCuda(3, seed=8)
    with fake_cupy(sim) as cp:
        comm = ring.get_communicator(3, backend="gpu", graphs=False)
        streams = _streams(cp, comm.devices)
        copies = {"left": 4}
        original = GpuCommunicator.peer_copy

        def failing(self, *args):
            copies["left"] -= 1
            if copies["left"] == 0:
                raise RuntimeError("cudaErrorLaunchFailure (injected)")
            return original(self, *args)

        monkeypatch.setattr(GpuCommunicator, "peer_copy", failing)

        def call(buffers):
            work = ring.allreduce(
                buffers, backend="gpu", graphs=False, stream=streams, async_op=async_op
            )
            assert ring.get_communicator(3, backend="gpu", graphs=False) is comm
            return work

        inputs = random_inputs(rng, 3, 23, np.float64, "sum")
        buffers = [sim.to_device(x, d) for d, x in enumerate(inputs)]
        with pytest.raises(RuntimeError, match="injected"):
            call(buffers)
        assert not any(s.queue for row in comm.stream_rows for s in row), "drained"
        assert not any(e is comm._done for s, e in sim.waits if s in streams)
        assert comm.last_elapsed_ms() == 0.0
        monkeypatch.setattr(GpuCommunicator, "peer_copy", original)
        buffers = [sim.to_device(x, d) for d, x in enumerate(inputs)]
        work = call(buffers)
        if async_op:
            work.wait()
        else:
            for stream in streams:
                stream.synchronize()
        for buf in buffers:
            check(sim.to_host(buf), inputs, "sum")
        # The API's cache must not hand this simulator's communicator to other tests.
        ring.communicator.registered("gpu").close()
