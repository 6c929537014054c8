"""Run under ``mpirun -n N``: what a repeated call keeps (its checked form and compiled
steps) must never stand in for what changed, and small ``direct`` calls (and
``reduce-broadcast`` allreduces) move their data in the pre-flight exchange alone.

* One buffer object per (algorithm, length), refilled with new random data before each of
  several calls and ops (as the harness restores its buffers): every result is checked
  against the float64 / exact reference, so a program compiled for an earlier call that
  read stale views, or a kept form that skipped a needed check, shows up here.
* ``direct`` and a ``reduce-broadcast`` allreduce at most ``ring.mpi.agree.RIDING_BYTES``
  per rank send no point-to-point message (counted by a proxy around the ring's
  communicator); just above it, they do.  Computed from the exchanged inputs, the
  reduce-broadcast result is bit for bit node 0's chain, rank 0 + rank 1 + ... in order.
* A repeated call without per-call options is bound to its buffer (``ring.mpi.bound``):
  every collective and algorithm, the same buffer refilled between calls, the op changed,
  the ring's algorithm changed between calls on one buffer, the buffer's dtype set in place
  or made read-only (refused on every rank, untouched): never the bound call's result.
* ``hierarchical`` with every rank in one group runs as the ring (its segmented receives:
  as many messages), under its own step names.
* A dropped buffer is freed once the ring closes.
Rank 0 prints one JSON line ``{"reports": [...]}``, every rank's ``{"rank", "nodes",
"cases", "failures", "messages", "freed"}``.
"""

from __future__ import annotations

import gc
import json
import sys
import traceback
import weakref
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpi4py import MPI
from reference import check, random_inputs

from ring import nvtx
from ring.mpi import MpiRing
from ring.mpi.agree import RIDING_BYTES
from ring.schedule import ALGORITHM_COLLECTIVES, ALGORITHMS, chunk_range, owned_chunk, plan

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()


class CountingComm:
    """The ring's communicator, counting the point-to-point calls made through it."""

    def __init__(self, comm):
        self._comm, self.calls = comm, 0

    def __getattr__(self, name):
        found = getattr(self._comm, name)
        if name in ("Sendrecv", "Isend", "Irecv", "Send", "Recv"):

            def counted(*args, **kwargs):
                self.calls += 1
                return found(*args, **kwargs)

            return counted
        return found


def reused_buffers(failures: list[str]) -> int:
    cases, seed = 0, 0
    with MpiRing(world) as comm:
        for algorithm in ALGORITHMS:
            for count, dtype in (
                (1, np.float32),
                (250, np.float32),
                (300, np.float64),
                (5003, np.int64),
            ):
                buf = np.empty(count, dtype=dtype)
                for op in ("sum", "avg", "max", "sum"):
                    seed += 1
                    cases += 1
                    inputs = random_inputs(np.random.default_rng(seed), nodes, count, dtype, op)
                    buf[...] = inputs[rank]
                    comm._collective("allreduce", [buf], op, algorithm=algorithm)
                    try:
                        check(buf, inputs, op)
                    except AssertionError:
                        failures.append(f"{algorithm} n={count} {op}: {traceback.format_exc(1)}")
    return cases


def _check_collective(name: str, buf, inputs, op: str) -> None:
    if name == "allreduce":
        check(buf, inputs, op)
        return
    owners = range(nodes) if name == "all_gather" else (rank,)
    for node in owners:
        a, b = chunk_range(buf.shape[0], nodes, owned_chunk(node, nodes))
        if name == "all_gather":
            np.testing.assert_array_equal(buf[a:b], inputs[node][a:b])
        else:
            check(buf[a:b], [x[a:b] for x in inputs], op)


def _bound_call(comm, name: str, buf, op: str, seed: int, failures: list[str], label: str):
    inputs = random_inputs(np.random.default_rng(seed), nodes, buf.shape[0], buf.dtype, op)
    buf[...] = inputs[rank]
    try:
        if name == "all_gather":
            comm.all_gather([buf])
        else:
            getattr(comm, name)([buf], op)
        _check_collective(name, buf, inputs, op)
    except Exception:  # noqa: BLE001 - every failure is reported, the run goes on
        failures.append(f"{label} {name} {op}: {traceback.format_exc(limit=3)}")


def bound_calls(failures: list[str]) -> int:
    cases, seed = 0, 1000
    with MpiRing(world) as comm:
        for algorithm in ALGORITHMS:
            comm.algorithm = algorithm
            for name in ALGORITHM_COLLECTIVES[algorithm]:
                for count, dtype in ((1, np.float32), (250, np.float32), (5003, np.int64)):
                    buf = np.empty(count, dtype=dtype)
                    for op in ("sum", "sum", "avg", "max", "max", "sum"):
                        seed += 1
                        cases += 1
                        _bound_call(comm, name, buf, op, seed, failures, algorithm)
                    if comm._bound.get(name) is None or comm._bound[name].buf is not buf:
                        failures.append(f"{algorithm} {name} n={count}: the call was not bound")
        buf = np.empty(250, dtype=np.float32)
        for algorithm in (*ALGORITHMS, "ring", "reduce-broadcast", "ring"):
            comm.algorithm = algorithm  # the ring's own option changed between calls
            for _ in range(2):
                seed += 1
                cases += 1
                _bound_call(comm, "allreduce", buf, "sum", seed, failures, f"then {algorithm}")
        buf.dtype = np.int32  # the same object, another dtype
        seed += 1
        cases += 1
        _bound_call(comm, "allreduce", buf, "sum", seed, failures, "dtype set in place")
        buf.flags.writeable = False
        before = buf.copy()
        try:
            comm.allreduce([buf])
            failures.append("a read-only buffer was reduced into")
        except ValueError:
            if not np.array_equal(buf, before):
                failures.append("a refused read-only buffer was written")
        cases += 1
    return cases


def messages_of(algorithm: str, count: int) -> int:
    """Point-to-point calls of one allreduce of ``count`` float32 by ``algorithm``, whose
    result is checked bit for bit against the plan's order of additions."""
    comm = MpiRing(world, algorithm=algorithm)
    counting = CountingComm(comm._comm)
    comm._comm = counting
    inputs = [np.random.default_rng(r).random(count, dtype=np.float32) for r in range(nodes)]
    buf = inputs[rank].copy()
    comm.allreduce([buf])
    comm._comm = counting._comm
    comm.close()
    if algorithm == "reduce-broadcast":  # node 0's chain, whichever rank computed it
        want = inputs[0].copy()
        for other in inputs[1:]:
            np.add(want, other, out=want)
        assert np.array_equal(buf, want)
    check(buf, inputs, "sum")
    return counting.calls


def one_group_as_ring() -> dict:
    """Messages of a ring and of a one-group hierarchical allreduce, cut into 1 KiB
    segments, and the step ranges the hierarchical one pushed."""
    pushed: list[str] = []
    made = nvtx._make
    nvtx._make = lambda message: lambda: pushed.append(message)
    counts = {}
    try:
        for algorithm in ("ring", "hierarchical"):
            comm = MpiRing(world, algorithm=algorithm, group_size=None, segment_bytes=1024)
            counting = CountingComm(comm._comm)
            comm._comm = counting
            inputs = [np.random.default_rng(r).random(5003) for r in range(nodes)]
            buf = inputs[rank].copy()
            pushed.clear()
            comm.allreduce([buf])
            check(buf, inputs, "sum")
            comm._comm = counting._comm
            comm.close()
            counts[algorithm] = counting.calls
    finally:
        nvtx._make = made
    steps = plan("allreduce", nodes, 5003, "hierarchical", 0, nodes).node_steps(rank)
    return {
        "messages": counts,
        "names": pushed[1:] == [f"{s.name} rank {rank}" for s in steps],
    }


def freed() -> bool:
    comm = MpiRing(world, algorithm="rabenseifner")
    buf = np.ones(1000)
    comm.allreduce([buf])
    ref = weakref.ref(buf)
    del buf
    gc.collect()
    comm.close()
    return ref() is None


def unbound() -> bool:
    """unbind() lets the ring's last buffer go while the ring stays open (the harness's,
    between sizes), and the ring's next call is right."""
    comm = MpiRing(world, algorithm="rabenseifner")
    buf = np.ones(100_000)
    for _ in range(2):  # the second call runs bound
        comm.allreduce([buf])
    ref = weakref.ref(buf)
    comm.unbind()
    del buf
    gc.collect()
    let_go = ref() is None
    again = np.ones(1000)
    comm.allreduce([again])
    comm.close()
    return let_go and bool(np.array_equal(again, np.full(1000, float(nodes))))


def dropped() -> bool:
    """A ring dropped without close() is freed at once, with the buffer its calls are bound
    to: nothing it keeps refers back to it (no cycle for the collector to find)."""
    gc.disable()
    try:
        comm = MpiRing(world, algorithm="direct")
        buf = np.ones(256, dtype=np.float32)  # gathered: its call rides the exchange
        comm.allreduce([buf])
        comm.allreduce([buf])  # bound
        refs = weakref.ref(comm), weakref.ref(buf)
        del comm, buf
        return all(ref() is None for ref in refs)
    finally:
        gc.enable()


def main() -> int:
    failures: list[str] = []
    cases = reused_buffers(failures) + bound_calls(failures)
    small = RIDING_BYTES // 4
    messages = {
        f"{algorithm} {where}": messages_of(algorithm, count)
        for algorithm in ("direct", "reduce-broadcast")
        for where, count in (("at the slot", small), ("above it", small + 1))
    }
    report = {
        "rank": rank,
        "nodes": nodes,
        "cases": cases,
        "failures": failures[:10],
        "messages": messages,
        "one group": one_group_as_ring(),
        "freed": freed(),
        "unbound": unbound(),
        "dropped": dropped(),
        "ranges": nvtx.AVAILABLE,  # bound gathered calls step by step, in ranges
    }
    reports = world.gather(report, root=0)
    if rank == 0:
        print(json.dumps({"reports": reports}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
