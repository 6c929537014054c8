"""The CUDA stand-in (``fakecuda``) tested itself: that it really reorders work and catches
a missing wait, refuses what CUDA refuses, and that its call signatures match the installed
CuPy's and NCCL's."""

from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest
from fakecuda import CUDARuntimeError, FakeCuda, fake_cupy
from fakecuda_parts import _AVG_UFUNCS


def test_simulator_runs_streams_out_of_program_order():
    """Two independent streams: some seed runs the later-enqueued one first."""
    orders = set()
    for seed in range(20):
        sim = FakeCuda(1, seed=seed)
        with fake_cupy(sim) as cp:
            a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
            seen = []
            a.enqueue(("run", lambda seen=seen: seen.append("a")))
            b.enqueue(("run", lambda seen=seen: seen.append("b")))
            sim.drain()
            orders.add(tuple(seen))
    assert orders == {("a", "b"), ("b", "a")}


def test_simulator_honours_waits_and_catches_their_absence():
    def run(drop_waits: bool, seed: int) -> list:
        sim = FakeCuda(1, seed=seed, drop_waits=drop_waits)
        with fake_cupy(sim) as cp:
            producer, consumer = (cp.cuda.Stream(non_blocking=True) for _ in range(2))
            event = cp.cuda.Event(disable_timing=True)
            seen = []
            producer.enqueue(("run", lambda: seen.append("write")))
            event.record(producer)
            consumer.wait_event(event)
            consumer.enqueue(("run", lambda: seen.append("read")))
            consumer.synchronize()
            sim.drain()
            return seen

    assert all(run(False, seed) == ["write", "read"] for seed in range(30))
    assert any(run(True, seed) == ["read", "write"] for seed in range(30))


def test_simulator_drops_one_chosen_wait_and_can_starve_a_stream():
    def run(seed: int, drop_wait=None, drop_waits=False, priority=False) -> tuple:
        sim = FakeCuda(1, seed=seed, drop_wait=drop_wait, drop_waits=drop_waits, priority=priority)
        with fake_cupy(sim) as cp:
            producer, consumer = (cp.cuda.Stream(non_blocking=True) for _ in range(2))
            first, second = (cp.cuda.Event(disable_timing=True) for _ in range(2))
            seen: list = []
            producer.enqueue(("run", lambda: seen.append("write")))
            first.record(producer)
            second.record(producer)
            consumer.wait_event(first)
            consumer.wait_event(second)
            consumer.enqueue(("run", lambda: seen.append("read")))
            sim.drain()
            return tuple(seen)

    # One wait dropped, the other still orders them.
    assert {run(seed, drop_wait=0) for seed in range(20)} == {("write", "read")}
    # Without waits the adversary runs the higher-ranked stream to the end first: both
    # orders occur, each seed always gives the same one.
    orders = [run(seed, drop_waits=True, priority=True) for seed in range(20)]
    assert set(orders) == {("write", "read"), ("read", "write")}
    assert orders == [run(seed, drop_waits=True, priority=True) for seed in range(20)]
    assert {run(seed, priority=True) for seed in range(20)} == {("write", "read")}


def test_simulator_refuses_what_cuda_refuses():
    sim = FakeCuda(2)
    with fake_cupy(sim) as cp:
        with cp.cuda.Device(1):
            stream = cp.cuda.Stream(non_blocking=True)
        event = cp.cuda.Event()  # on device 0
        with pytest.raises(CUDARuntimeError):
            event.record(stream)
        with pytest.raises(RuntimeError, match="does not match"), stream:
            pass
        x = sim.to_device(np.ones(4, np.float32), 1)
        with pytest.raises(ValueError, match="current device"):
            cp.add(x, x, out=x)
        y = sim.to_device(np.ones(4, np.float32), 0)
        with pytest.raises(CUDARuntimeError, match="names devices"):
            cp.cuda.runtime.memcpyPeerAsync(y.data.ptr, 1, x.data.ptr, 0, 16, 0)


def _parameters(function) -> list[str]:
    """Parameter names from the signature Python sees, else from the docstring."""
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return _signature_from_doc(function)
    return [n for n in names if n != "self"]


def _signature_from_doc(function) -> list[str]:
    """Parameter names from a Cython docstring's first line, e.g.
    ``memcpyPeerAsync(intptr_t dst, int dstDevice, ...)``."""
    first = (function.__doc__ or "").strip().splitlines()[0]
    inside = re.match(r"^[\w.]+\((.*)\)", first).group(1)
    names = []
    for part in filter(None, (p.strip() for p in inside.split(","))):
        part = part.split("=")[0].strip()
        names.append(part.split()[-1].lstrip("*"))
    return [n for n in names if n != "self"]


def test_simulated_calls_match_the_installed_cupy():
    """Every CuPy entry point ring.gpu calls exists in the real CuPy with the parameters the
    simulator accepts (checked from CuPy's own signatures; skipped without CuPy)."""
    real = pytest.importorskip("cupy")
    if getattr(real, "__fake__", False):
        pytest.skip("cupy is the simulator here")
    sim = FakeCuda(1).module
    runtime_calls = [
        "getDeviceCount",
        "getDevice",
        "setDevice",
        "deviceCanAccessPeer",
        "deviceEnablePeerAccess",
        "memcpyPeerAsync",
        "memcpyAsync",
    ]
    for name in runtime_calls:
        real_params = _signature_from_doc(getattr(real.cuda.runtime, name))
        fake_params = list(inspect.signature(getattr(sim.cuda.runtime, name)).parameters)
        assert real_params == fake_params, name
    assert real.cuda.runtime.memcpyDeviceToDevice == sim.cuda.runtime.memcpyDeviceToDevice
    ensure = getattr(real.cuda.runtime, "_deviceEnsurePeerAccess", None)
    if ensure is not None:  # private in CuPy; ring.gpu falls back when it is gone
        fake = sim.cuda.runtime._deviceEnsurePeerAccess
        assert _signature_from_doc(ensure) == list(inspect.signature(fake).parameters)
    assert issubclass(real.cuda.runtime.CUDARuntimeError, RuntimeError)
    assert real.cuda.runtime.CUDARuntimeError(704).status == 704
    for cls, names in (
        (real.cuda.Stream, ["wait_event", "synchronize", "__enter__", "__exit__"]),
        (real.cuda.Stream, ["begin_capture", "end_capture", "is_capturing"]),
        (real.cuda.Event, ["record", "synchronize"]),
        (real.cuda.Graph, ["launch"]),
        (real.RawKernel, ["__call__"]),
    ):
        for name in names:
            assert callable(getattr(cls, name)), (cls, name)
    stream_params = inspect.signature(real.cuda.Stream).parameters
    assert "non_blocking" in stream_params
    assert "disable_timing" in inspect.signature(real.cuda.Event).parameters
    assert _signature_from_doc(real.cuda.get_current_stream) == ["device_id"]
    assert _signature_from_doc(real.cuda.get_elapsed_time) == ["start_event", "end_event"]
    for name in ("add", "multiply", "maximum", "minimum", *_AVG_UFUNCS):
        assert isinstance(getattr(real, name), real.ufunc), name
    assert _parameters(real.cuda.Stream.begin_capture) == ["mode"]
    assert _parameters(real.cuda.Graph.launch) == ["stream"]
    assert {"multiProcessorCount", "l2CacheSize"} <= set(real.cuda.runtime.getDeviceProperties(0))


def test_simulated_nccl_matches_the_installed_one():
    """The NCCL calls of the nccl backend exist with these parameters (needs CuPy with NCCL)."""
    real = pytest.importorskip("cupy")
    if getattr(real, "__fake__", False):
        pytest.skip("cupy is the simulator here")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from cupy.cuda import nccl
    if not getattr(nccl, "available", False):
        pytest.skip("CuPy cannot load NCCL here")
    fake = FakeCuda(1).module.cuda.nccl
    for name in ("allReduce", "destroy"):
        real_params = _signature_from_doc(getattr(nccl.NcclCommunicator, name))
        fake_params = list(inspect.signature(getattr(fake.NcclCommunicator, name)).parameters)
        assert real_params == fake_params[1:], name  # the fake's list starts with self
    assert _signature_from_doc(nccl.NcclCommunicator.initAll) == ["devices"]
    for name in dir(fake):
        if name.startswith("NCCL_"):
            assert hasattr(nccl, name), name
    assert callable(nccl.groupStart) and callable(nccl.groupEnd) and callable(nccl.get_version)
