"""Faults users cause on the threaded backend: Ctrl-C mid-call, concurrent failures, dropped
communicators, very large N.  Never a wrong answer, never a hang."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from ctrl_c import let_children_see_sigint

import ring
from ring import CpuCommunicator
from ring.cpu import INLINE_BYTES
from ring.schedule import ALGORITHMS

let_children_see_sigint()

SYNCS = ["pairwise", "barrier"]

# The child loops on allreduce until the parent's SIGINT lands, then checks what the next
# calls return.  One JSON line per round.
_CHILD = textwrap.dedent(
    """
    import json, sys, threading
    import numpy as np
    import ring
    from ring import CpuCommunicator

    sync, rounds, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    algorithm, N, count = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    executor = sys.argv[7]
    ins = [np.full(count, i + 1.0) for i in range(N)]
    expected = float(sum(range(1, N + 1)))

    def wrong(bufs):
        return sum(int((b != expected).sum()) for b in bufs)

    for r in range(rounds):
        bufs = [x.copy() for x in ins]
        comm = None
        if mode == "comm":
            comm = CpuCommunicator(N, sync=sync, algorithm=algorithm, executor=executor)
        print("go", flush=True)
        result = {"round": r}
        try:
            while True:
                if comm is None:
                    ring.allreduce(bufs, sync=sync, algorithm=algorithm, executor=executor)
                else:
                    comm.allreduce(bufs)
        except KeyboardInterrupt:
            result["interrupt"] = "KeyboardInterrupt"
        except BaseException as exc:
            result["interrupt"] = type(exc).__name__ + ": " + str(exc)
        if comm is not None:
            result["closed_after_interrupt"] = comm.closed
            result["threaded_calls"] = comm._crew.jobs
            if comm.closed:
                try:
                    comm.allreduce([x.copy() for x in ins])
                    result["next_call"] = "ran"
                except BaseException as exc:
                    result["next_call"] = type(exc).__name__
            else:
                # Interrupted between calls, not inside one: the communicator still works.
                b = [x.copy() for x in ins]
                comm.allreduce(b)
                result["wrong_on_same_comm"] = wrong(b)
            try:
                comm.close()
                result["close"] = "ok"
            except BaseException as exc:
                result["close"] = repr(exc)
        # The next two calls through the public API must be complete and right.
        wrongs = []
        for _ in range(2):
            b = [x.copy() for x in ins]
            ring.allreduce(b, sync=sync)
            wrongs.append(wrong(b))
        result["wrong_after"] = wrongs
        result["ring_threads"] = sum(
            t.name.startswith("ring-cpu") and t.is_alive() for t in threading.enumerate()
        )
        print(json.dumps(result), flush=True)
    """
)


def _interrupt_rounds(
    sync, mode, rounds, seed, algorithm="ring", nodes=4, count=1 << 20, executor="nodes"
):
    """Rounds of the child on ``nodes`` buffers of ``count`` float64 (8 MiB by default: on
    the worker threads)."""
    rng = np.random.default_rng(seed)
    args = [sync, str(rounds), mode, algorithm, str(nodes), str(count), executor]
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    results = []
    try:
        for _ in range(rounds):
            assert child.stdout.readline().strip() == "go"
            time.sleep(rng.uniform(0.02, 0.25))
            child.send_signal(signal.SIGINT)
            results.append(json.loads(child.stdout.readline()))
        assert child.wait(timeout=60) == 0, child.stderr.read()
    finally:
        child.kill()
    return results


@pytest.mark.slow
@pytest.mark.parametrize("sync", SYNCS)
@pytest.mark.parametrize("mode", ["api", "comm"])
def test_ctrl_c_mid_call_never_leaves_a_wrong_or_early_result(sync, mode):
    for r in _interrupt_rounds(sync, mode, rounds=6, seed=len(sync) + len(mode)):
        _check_round(r, mode)


def _check_round(r, mode, nodes=4):
    assert r["interrupt"] == "KeyboardInterrupt", r
    assert r["wrong_after"] == [0, 0], r
    if mode == "comm":
        # Interrupted inside a call, a communicator is closed; between calls it stays
        # usable and right.  Closing it afterwards never raises.
        assert r["closed_after_interrupt"] or r["wrong_on_same_comm"] == 0, r
        if r["closed_after_interrupt"]:
            assert r["next_call"] == "CommunicatorClosedError", r
        assert r["close"] == "ok", r
    # Only the cached communicator's threads remain, none of an interrupted one.
    assert r["ring_threads"] == nodes, r


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["api", "comm"])
def test_ctrl_c_mid_inline_call_ends_it_as_on_the_threads(mode):
    """A buffer just under INLINE_BYTES runs on the calling thread; on 8 nodes a call takes
    milliseconds, so the SIGINT lands inside one: the communicator closes and refuses the
    next call, as after an interrupted threaded call, and no result is wrong.  (On a
    communicator every call after the first repeats on the same buffers and runs bound, node
    after node: ring.host.moves.)"""
    nodes, count = 8, INLINE_BYTES // 8 - 1
    rounds = _interrupt_rounds("pairwise", mode, rounds=4, seed=5, nodes=nodes, count=count)
    for r in rounds:
        _check_round(r, mode, nodes)
    if mode == "comm":
        assert all(r["threaded_calls"] == 0 for r in rounds), rounds
        assert any(r["closed_after_interrupt"] for r in rounds), rounds


@pytest.mark.slow
def test_ctrl_c_mid_bound_inline_call_ends_it_as_on_the_threads():
    """executor="slices" just under INLINE_BYTES on 8 nodes: every call after the first
    repeats on the same buffers and runs bound by position (ring.host.moves; bound by nodes:
    the test above), milliseconds each, so the
    SIGINT lands inside one: the communicator closes and refuses the next call, and no
    result is wrong."""
    nodes, count = 8, INLINE_BYTES // 8 - 1
    rounds = _interrupt_rounds(
        "pairwise", "comm", rounds=4, seed=13, nodes=nodes, count=count, executor="slices"
    )
    for r in rounds:
        _check_round(r, "comm", nodes)
    assert all(r["threaded_calls"] == 0 for r in rounds), rounds
    assert any(r["closed_after_interrupt"] for r in rounds), rounds


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["api", "comm"])
def test_ctrl_c_mid_sliced_call_ends_it_as_on_the_node_threads(mode):
    """executor="slices" on 8 MiB per node: the caller runs one slice while a worker runs
    another.  A SIGINT inside the call stops the worker at its next tile; the
    communicator closes and refuses the next call, and no result is wrong."""
    rounds = _interrupt_rounds("pairwise", mode, rounds=4, seed=9, executor="slices")
    for r in rounds:
        _check_round(r, mode)
    if mode == "comm":
        assert any(r["closed_after_interrupt"] for r in rounds), rounds
        if len(os.sched_getaffinity(0)) > 1:  # one core: the caller alone runs the call
            assert all(r["threaded_calls"] > 0 for r in rounds), rounds


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "ring"])
def test_ctrl_c_mid_call_holds_for_every_algorithm(algorithm):
    """The same guarantees on every other algorithm, alternating syncs and entry points
    (scratch, several moves per step, idle nodes, the barrier fallback)."""
    k = ALGORITHMS.index(algorithm)
    sync, mode = SYNCS[k % 2], ("api", "comm")[k // 2 % 2]
    for r in _interrupt_rounds(sync, mode, rounds=3, seed=k, algorithm=algorithm):
        _check_round(r, mode)


def test_ctrl_c_inside_a_with_block_surfaces_as_keyboard_interrupt():
    code = textwrap.dedent(
        """
        import os, signal, threading, numpy as np
        from ring import CpuCommunicator
        bufs = [np.ones(1 << 20) for _ in range(4)]
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            with CpuCommunicator(4) as comm:
                while True:
                    comm.allreduce(bufs)
        except KeyboardInterrupt:
            print("KeyboardInterrupt", comm.closed)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["KeyboardInterrupt", "True"], out.stderr


def test_one_threads_failure_never_reaches_another_threads_call(monkeypatch):
    from ring.cpu.checks import resolve_op as real

    def failing_for_a(op, dtype):
        ufunc = real(op, dtype)
        if threading.current_thread().name != "caller-A":
            return ufunc

        def add(a, b, out):
            raise FloatingPointError("injected in A's call")

        return add

    monkeypatch.setattr("ring.cpu.checks.resolve_op", failing_for_a)
    nodes, rounds = 5, 50
    rng = np.random.default_rng(11)
    inputs = [rng.uniform(1, 2, 4099) for _ in range(nodes)]
    expected = np.sum(inputs, axis=0)
    outcomes = {"A": [], "B": []}
    for _ in range(rounds):
        gate = threading.Barrier(2)

        def call(who, gate=gate):
            bufs = [x.copy() for x in inputs]
            gate.wait()
            try:
                ring.allreduce(bufs)
            except FloatingPointError as exc:
                outcomes[who].append(type(exc).__name__)
                return
            ok = all(np.allclose(b, expected, rtol=1e-12) for b in bufs)
            outcomes[who].append("ok" if ok else "WRONG")

        threads = [threading.Thread(target=call, args=(w,), name=f"caller-{w}") for w in "AB"]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
    assert outcomes["B"] == ["ok"] * rounds
    assert outcomes["A"] == ["FloatingPointError"] * rounds


def test_a_communicator_dropped_without_close_stops_its_threads():
    comm = CpuCommunicator(6)
    comm.allreduce([np.ones(100) for _ in range(6)])
    threads = list(comm._threads)
    assert all(t.is_alive() for t in threads)
    del comm
    gc.collect()
    for t in threads:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in threads)


def _state_bytes(nodes):
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        comm = CpuCommunicator(nodes)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    comm.close()
    return used


def test_communicator_state_grows_linearly_with_nodes():
    # Quadratic state (a signal per node and step) would grow 16x from 256 to 1024 nodes.
    small, large = _state_bytes(256), _state_bytes(1024)
    assert large < 6 * small, (small, large)


@pytest.mark.slow
def test_a_thousand_nodes_are_still_right():
    nodes = 1024
    rng = np.random.default_rng(5)
    inputs = [rng.integers(1, 100, 2053).astype(np.int64) for _ in range(nodes)]
    buffers = [x.copy() for x in inputs]
    with CpuCommunicator(nodes) as comm:
        comm.allreduce(buffers)
    expected = np.sum(inputs, axis=0)
    for b in buffers:
        np.testing.assert_array_equal(b, expected)


@pytest.mark.skipif(os.name != "posix", reason="SIGINT delivery is POSIX")
def test_the_issue_snippet_prints_zero():
    code = textwrap.dedent(
        """
        import numpy as np, ring, threading, os, signal
        N = 4; ins = [np.full(2 << 20, i + 1.0) for i in range(N)]; bufs = [x.copy() for x in ins]
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            while True: ring.allreduce(bufs)
        except KeyboardInterrupt: pass
        b = [x.copy() for x in ins]; ring.allreduce(b)
        print("wrong elements:", sum(int((x != 10).sum()) for x in b))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "wrong elements: 0", out.stderr


def test_children_see_sigint_when_the_run_inherited_it_ignored():
    # A run started in the background has SIGINT ignored; its Ctrl-C tests' children must
    # still get Python's handler (tests/ctrl_c.py), or they would loop for ever.
    code = textwrap.dedent(
        f"""
        import subprocess, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from ctrl_c import let_children_see_sigint
        let_children_see_sigint()
        probe = "import signal as s; print(s.getsignal(s.SIGINT) is s.default_int_handler)"
        print(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout)
        """
    )
    ignored = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert ignored.stdout.strip() == "True", ignored.stderr


@pytest.mark.parametrize("executor", ["nodes", "slices"])
@pytest.mark.parametrize("through", ["ring.allreduce", "communicator"])
def test_a_list_changed_by_another_thread_mid_call_never_reduces_an_unchecked_buffer(
    executor, through
):
    """Another thread swaps a longer buffer in and out of the caller's list while calls
    run.  A call runs the list it checked (one snapshot): it either refuses the unequal
    lengths or reduces the two short buffers; the long buffer, never accepted, is never
    touched (it was reduced on its first 100 elements when the list was read twice)."""
    short = [np.ones(100) for _ in range(2)]
    long = np.ones(1000)
    shared = list(short)
    stop = threading.Event()

    def swap():
        while not stop.is_set():
            shared[1] = long
            shared[1] = short[1]

    swapper = threading.Thread(target=swap)
    swapper.start()
    refused = 0
    try:
        with CpuCommunicator(2, executor=executor) as comm:
            run = comm.allreduce if through == "communicator" else ring.allreduce
            for _ in range(2000):
                for b in short:
                    b[...] = 1.0
                try:
                    if through == "communicator":
                        run(shared)
                    else:
                        run(shared, executor=executor)
                except ValueError:
                    refused += 1
                    continue
                assert np.array_equal(short[0], np.full(100, 2.0))
    finally:
        stop.set()
        swapper.join()
    assert np.array_equal(long, np.ones(1000))
