"""The cpu backend pins its communicator's worker threads through the public
``CpuCommunicator.threads``, one core each, and lets a point's buffers go once measured."""

import gc
import os
import weakref

import numpy as np
import pytest

from ring.bench.backends.cpu import CpuBackend, CpuSession
from ring.bench.cli import parse_args
from ring.bench.placement import machine_cores
from ring.cpu import SYNC_MODES, CpuCommunicator


def test_threads_are_the_live_workers_one_per_node_and_read_only():
    with CpuCommunicator(3) as comm:
        threads = comm.threads
        assert len(threads) == 3 and len({t.native_id for t in threads}) == 3
        assert all(t.is_alive() for t in threads)
        with pytest.raises(AttributeError):
            comm.threads = ()
    assert not any(t.is_alive() for t in threads)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="thread affinity is Linux's")
def test_pin_holds_each_worker_thread_to_its_own_core():
    if len(machine_cores()) < 2:
        pytest.skip("pinning two workers to distinct cores needs two cores")
    config = parse_args(["--pin", "1", "--nodes", "2"], {"cpu": CpuBackend}, SYNC_MODES)
    session = CpuSession(2, SYNC_MODES[0], config, None)
    try:
        assert session.pinned
        masks = [os.sched_getaffinity(t.native_id) for t in session.communicator.threads]
        assert [len(mask) for mask in masks] == [1, 1]
        assert masks[0] != masks[1]
    finally:
        session.close()


def test_a_released_session_holds_none_of_its_points_buffers():
    """A sweep keeps every series' session open; what one point allocated must be free
    before the next series loads its own (at 1 GiB, N = 4 is 4 GiB a series)."""
    config = parse_args(["--nodes", "2"], {"cpu": CpuBackend}, SYNC_MODES)
    session = CpuSession(2, SYNC_MODES[0], config, None)
    try:
        inputs = [np.arange(1, 5001, dtype=np.float32) * (i + 1) for i in range(2)]
        session.load(inputs)
        for _ in range(3):  # the repeats run bound, on the workers
            session.restore()
            session.call()
        np.testing.assert_array_equal(session.results()[0], inputs[0] * 3)
        watched = [weakref.ref(b) for b in (*session.buffers, *inputs)]
        session.release()
        del inputs
        gc.collect()
        assert [w() for w in watched] == [None] * 4
    finally:
        session.close()
