"""Bad input is refused before any thread starts, with every buffer untouched."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import ring
from ring import CpuCommunicator

NODES = 37  # a node count no other test caches, so a started thread would show


def _good(count=10, dtype=np.float32, nodes=NODES):
    return [np.arange(1, count + 1, dtype=dtype) * (i + 1) for i in range(nodes)]


def _bad_cases():
    good = _good()
    yield "different lengths", [*good[:-1], np.ones(11, np.float32)], {}, ValueError, "elements"
    yield "different dtypes", [*good[:-1], np.ones(10, np.float64)], {}, TypeError, "dtype"
    columns = np.ones((2, 10), np.float32)[:, ::2]  # 2-D, 10 elements, not contiguous
    yield "2-D strided", [*good[:-1], columns], {}, ValueError, "not C-contiguous"
    strided = np.ones(20, np.float32)[::2]
    yield "not contiguous", [*good[:-1], strided], {}, ValueError, "contiguous"
    frozen = np.ones(10, np.float32)
    frozen.flags.writeable = False
    yield "read-only", [*good[:-1], frozen], {}, ValueError, "read-only"
    yield "not an array", [*good[:-1], [1.0] * 10], {}, TypeError, "NumPy array"
    yield "unknown op", good, {"op": "mean"}, ValueError, "unknown op"
    yield "op None", good, {"op": None}, ValueError, "unknown op None"
    yield "unknown backend", good, {"backend": "fpga"}, ValueError, "unknown backend"
    yield "unknown sync", good, {"sync": "none"}, ValueError, "unknown sync"
    yield "unknown option", good, {"threads": 3}, TypeError, "unknown option"
    complex_bufs = [b.astype(np.complex64) for b in good]
    yield "max on complex", complex_bufs, {"op": "max"}, TypeError, "not defined for complex"
    yield "bool sum", [b > 1 for b in good], {}, TypeError, "not defined for bool"
    yield "str dtype", [b.astype("U3") for b in good], {}, TypeError, "not supported"
    yield "object dtype", [b.astype(object) for b in good], {}, TypeError, "not supported"
    shared = np.ones(20, np.float32)
    yield "overlap", [shared[:10], shared[5:15], *good[2:]], {}, ValueError, "share memory"
    yield "same array twice", [good[0], good[0], *good[2:]], {}, ValueError, "share memory"


CASES = list(_bad_cases())


@pytest.mark.parametrize(
    ("buffers", "kwargs", "error", "message"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_input_is_refused_before_anything_runs(buffers, kwargs, error, message):
    snapshot = [np.array(b, copy=True) for b in buffers]
    threads_before = set(threading.enumerate())
    op = kwargs.pop("op", "sum")
    with pytest.raises(error, match=message):
        ring.allreduce(buffers, op, **kwargs)
    assert set(threading.enumerate()) == threads_before, "a thread started"
    for before, after in zip(snapshot, buffers, strict=True):
        np.testing.assert_array_equal(np.asarray(after), before)


@pytest.mark.parametrize("buffers", [[], (), None, "abc", np.ones(4)])
def test_not_a_list_of_buffers(buffers):
    with pytest.raises((TypeError, ValueError)):
        ring.allreduce(buffers)


def test_errors_through_an_open_communicator_leave_it_usable():
    with CpuCommunicator(3) as comm:
        good = [np.ones(6) * (i + 1) for i in range(3)]
        with pytest.raises(ValueError):
            comm.allreduce([good[0], good[1], np.ones(7)])
        with pytest.raises(ValueError):
            comm.reduce_scatter(good, "mean")
        comm.allreduce(good)
        np.testing.assert_array_equal(good[2], np.full(6, 6.0))


@pytest.mark.parametrize(
    ("nodes", "error"), [(0, ValueError), (-2, ValueError), (2.0, TypeError), (True, TypeError)]
)
def test_communicator_rejects_bad_node_counts(nodes, error):
    with pytest.raises(error):
        CpuCommunicator(nodes)


def test_import_and_run_without_nvtx():
    code = (
        "import sys; sys.modules['nvtx'] = None\n"
        "import numpy as np, ring\n"
        "assert not ring.nvtx.AVAILABLE\n"
        "b = [np.ones(5) * (i + 1) for i in range(3)]\n"
        "ring.allreduce(b)\n"
        "assert (b[1] == 6).all()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_nvtx_disable_turns_the_ranges_off():
    code = "import ring.nvtx as r; assert not r.AVAILABLE"
    env = {**os.environ, "NVTX_DISABLE": "1"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, env=env)
