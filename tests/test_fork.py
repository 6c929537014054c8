"""A child of ``os.fork()`` after the parent started worker threads (``ring.allreduce``
above ``INLINE_BYTES`` per node, a held communicator, an ``async_op`` call): its calls run
on worker threads of its own, and are right; a call its parent started is refused in one
line, not waited for.  A child of an MPI rank refuses every MPI call in one line.

Each case runs in a Python of its own (a fork of pytest's process would copy its threads
too): the parent forks, the child exits 0 only if every check held, and an alarm in the
child turns a hang into a failure instead of a stuck run.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest
from test_mpi import MPIRUN, json_lines, mpirun

PRELUDE = """
import os, signal, sys, threading
import numpy as np
import ring

NODES = 4
COUNT = (5 << 20) // 8  # 5 MiB of float64 per node: above INLINE_BYTES, on the workers


def buffers(seed):
    return [np.arange(COUNT, dtype=np.float64) % 97 + seed + node for node in range(NODES)]


def right(bufs, seed):
    expected = np.sum(buffers(seed), axis=0)  # float64 sum: exact for these integers
    return all(np.array_equal(b, expected) for b in bufs)


def in_child(check):
    '''Fork; the child runs ``check()`` under an alarm and exits 0 if it returned True.'''
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)  # a hang kills the child: its parent reports it
        try:
            ok = check()
        except BaseException as exc:  # noqa: BLE001 - said, and the child fails
            print(f"child: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
"""


def _run(body: str) -> subprocess.CompletedProcess:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


CASES = {
    "the module function": """
        bufs = buffers(1)
        ring.allreduce(bufs)  # the cached communicator's workers start
        assert right(bufs, 1)

        def check():
            bufs = buffers(2)
            ring.allreduce(bufs)
            return right(bufs, 2)
    """,
    "a held communicator, by nodes and by slices": """
        comm = ring.CpuCommunicator(NODES)
        bufs = buffers(1)
        comm.allreduce(bufs)
        comm.allreduce(bufs)  # bound to its buffers

        def check():
            ok = True
            for executor in ("nodes", "slices"):
                mine = buffers(3)
                comm._collective("allreduce", mine, "sum", executor=executor)
                ok = ok and right(mine, 3)
            again = buffers(1)
            comm.allreduce(again)  # the parent's bound call's buffers, as the child's copy
            return ok and right(again, 1) and len(comm.threads) == NODES
    """,
    "auto, planned in the parent": """
        AUTO = {"algorithm": "auto", "inline_bytes": 0}  # every candidate on the workers
        for _ in range(30):
            bufs = buffers(1)
            ring.allreduce(bufs, **AUTO)
        assert right(bufs, 1)

        def check():
            ok = True
            for _ in range(3):
                mine = buffers(4)
                ring.allreduce(mine, **AUTO)
                ok = ok and right(mine, 4)
            return ok
    """,
    "an async call": """
        bufs = buffers(1)
        ring.allreduce(bufs, async_op=True).wait()  # the async queue's thread starts

        def check():
            mine = buffers(5)
            ring.allreduce(mine, async_op=True).wait()
            return right(mine, 5)
    """,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_fork_child_runs_calls_on_workers_of_its_own(case):
    done = _run(textwrap.dedent(CASES[case]) + "\nsys.exit(in_child(check))\n")
    assert done.returncode == 0, done.stderr


def test_the_parent_goes_on_after_its_child_called():
    done = _run(
        textwrap.dedent(CASES["the module function"])
        + """
assert in_child(check) == 0
bufs = buffers(6)
ring.allreduce(bufs)
sys.exit(0 if right(bufs, 6) else 1)
"""
    )
    assert done.returncode == 0, done.stderr


def test_multiprocessing_by_fork_runs_calls_in_its_workers():
    done = _run(
        """
import multiprocessing

def reduce_in_worker(seed):
    bufs = buffers(seed)
    ring.allreduce(bufs)
    return right(bufs, seed)

bufs = buffers(1)
ring.allreduce(bufs)
signal.alarm(60)  # a hang in a worker ends this process: the test fails
with multiprocessing.get_context("fork").Pool(2) as pool:
    results = pool.map(reduce_in_worker, range(4))
sys.exit(0 if results == [True] * 4 else 1)
"""
    )
    assert done.returncode == 0, done.stderr


def test_a_call_the_parent_started_is_refused_in_the_child_in_one_line():
    """It runs in the parent, not in the child: waiting for it there would never end."""
    done = _run(
        """
from ring import work

release = threading.Event()
pending = work.submit("cpu", release.wait)  # the parent's async thread, busy

def check():
    try:
        pending.wait()
    except RuntimeError as exc:
        said = str(exc)
        print(said, file=sys.stderr)
        return "\\n" not in said and f"process {os.getppid()}" in said
    return False

code = in_child(check)
release.set()
pending.wait()
sys.exit(code)
"""
    )
    assert done.returncode == 0, done.stderr
    assert "started in process" in done.stderr


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (apt-get install openmpi-bin)")
@pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed (pip install '.[mpi]')"
)
def test_a_fork_child_of_an_mpi_rank_refuses_every_mpi_call_in_one_line():
    """MPI cannot be used in a process made by fork(): a call that joined its parent's
    peers would leave them, or it, waiting.  The parents' ring runs on."""
    code, out, err, _ = mpirun(2, "fork.py")
    assert code == 0, err
    (report,) = json_lines(out)
    assert report["after"] == [True, True]
    for exit_code, said in report["child"]:
        assert exit_code == 0
        module, held, new = said
        assert module.startswith("module: RuntimeError: ring.mpi: this process was made by fork()")
        assert held.startswith("held: CommunicatorClosedError: MpiRing(rank=")
        assert "which forked this one: MPI cannot be used in a process made by fork()" in held
        assert new.startswith("new: RuntimeError: ring.mpi: this process was made by fork()")
        assert not any("\n" in line for line in said)
