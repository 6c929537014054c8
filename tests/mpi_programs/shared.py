"""Run under ``mpirun -n N``: calls on arrays of :meth:`ring.mpi.MpiRing.shared_buffer`.

* Every algorithm and collective, several dtypes and ops, lengths 0, 1, < N, primes and
  3,000,017 (many tiles, split between the ranks), each on a shared array refilled with
  new random data: checked against the float64 / exact reference, bit for bit the result
  of the same call by messages on a private copy, and with no point-to-point message.
* Repeated calls without per-call options (bound to the array), the op changed between.
* A view of a shared array is not the allocation: it runs by messages, correctly.
* Refused on every rank alike, nothing touched: one rank's array private, or from another
  allocation; a request whose count differs between ranks, a bad count or dtype; a part
  the file system cannot hold (rank 1 under a real ``RLIMIT_FSIZE``); a ``RING_SHM_DIR``
  (rank 1's) that is not a directory.
* Under ``RING_SHM_DIR``, every rank's part is made there (this rank maps N files of it),
  and nothing is left there.
* Nothing is left in the shared directory; the array outlives the ring; a dropped array
  leaves the ring's table.
Rank 0 prints one JSON line ``{"reports": [...]}``, every rank's ``{"rank", "nodes",
"cases", "failures", "refusals", "messages", "left", "after_close", "forgotten",
"chosen"}``.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import signal
import sys
import tempfile
import traceback
import weakref
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mpi4py import MPI
from reference import check, ops_for, random_inputs
from reuse import CountingComm, _check_collective

from ring.mpi import MpiRing
from ring.mpi.shared import SHM_DIR_ENV, shared_directory
from ring.schedule import ALGORITHM_COLLECTIVES, ALGORITHMS, chunk_range, owned_chunk

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
SIZES = sorted({0, 1, max(nodes - 1, 1), 13, 97, 1009, 70001})
DTYPES = [np.float32, np.float64, np.int64, np.complex64]
LARGE = 3_000_017


def _compared(name: str, buf):
    """The part of ``buf`` the collective defines on this rank."""
    if name == "reduce_scatter":
        a, b = chunk_range(buf.shape[0], nodes, owned_chunk(rank, nodes))
        return buf[a:b]
    return buf


def _call(comm, name: str, buf, op: str, algorithm: str | None) -> None:
    options = {} if algorithm is None else {"algorithm": algorithm}
    comm._collective(name, [buf], None if name == "all_gather" else op, **options)


def one_case(comm, arrays: dict, name, algorithm, count, dtype, op, seed) -> int:
    """One call on a shared array and the same call by messages; returns its messages."""
    key = (count, np.dtype(dtype).str)
    if key not in arrays:
        arrays[key] = comm.shared_buffer(count, dtype)
    shared = arrays[key]
    inputs = random_inputs(np.random.default_rng(seed), nodes, count, dtype, op)
    shared[...] = inputs[rank]
    private = inputs[rank].copy()
    counting = CountingComm(comm._comm)
    comm._comm = counting
    try:
        _call(comm, name, shared, op, algorithm)
    finally:
        comm._comm = counting._comm
    _check_collective(name, shared, inputs, op)
    _call(comm, name, private, op, algorithm)
    np.testing.assert_array_equal(_compared(name, shared), _compared(name, private))
    return counting.calls


def every_algorithm(failures: list[str]) -> tuple[int, int]:
    cases = messages = 0
    with MpiRing(world) as comm:
        arrays: dict = {}
        for a, algorithm in enumerate(ALGORITHMS):
            for c, name in enumerate(ALGORITHM_COLLECTIVES[algorithm]):
                for s, count in enumerate(SIZES):
                    dtype = DTYPES[(a + c + s) % len(DTYPES)]
                    ops = ops_for(dtype)
                    op = ops[(a + s) % len(ops)]
                    cases += 1
                    seed = 100 * cases + 7
                    label = f"{algorithm} {name} n={count} {np.dtype(dtype)} {op}"
                    try:
                        messages += one_case(comm, arrays, name, algorithm, count, dtype, op, seed)
                    except Exception:  # noqa: BLE001 - every failure is reported
                        failures.append(f"{label}: {traceback.format_exc(limit=4)}")
        for algorithm in ("ring", "direct", "rabenseifner", "hierarchical"):
            cases += 1
            try:
                messages += one_case(
                    comm, arrays, "allreduce", algorithm, LARGE, np.float32, "sum", cases
                )
            except Exception:  # noqa: BLE001
                failures.append(f"{algorithm} large: {traceback.format_exc(limit=4)}")
    return cases, messages


def bound_calls(failures: list[str]) -> int:
    """The same shared array again and again, without per-call options, refilled."""
    cases = 0
    with MpiRing(world, algorithm="direct") as comm:
        shared = comm.shared_buffer(5003, np.float64)
        for seed, op in enumerate(("sum", "avg", "max", "sum", "sum", "prod")):
            if seed == 4:
                comm.algorithm = "ring"
            cases += 1
            inputs = random_inputs(np.random.default_rng(seed), nodes, 5003, np.float64, op)
            shared[...] = inputs[rank]
            comm.allreduce([shared], op)
            try:
                check(shared, inputs, op)
            except AssertionError:
                failures.append(f"bound {op}: {traceback.format_exc(limit=2)}")
        cases += 1  # a view is not the allocation: by messages, still right
        inputs = random_inputs(np.random.default_rng(99), nodes, 5003, np.float64, "sum")
        shared[...] = inputs[rank]
        comm.allreduce([shared[1:]])
        try:
            check(shared[1:], [x[1:] for x in inputs], "sum")
            assert shared[0] == inputs[rank][0]
        except AssertionError:
            failures.append(f"view: {traceback.format_exc(limit=2)}")
    return cases


def _outcome(action, watched=()) -> list:
    """``[type, message, untouched]`` of ``action()``, which must raise."""
    before = [np.array(w, copy=True) for w in watched]
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - reported
        untouched = all(np.array_equal(b, w) for b, w in zip(before, watched, strict=True))
        return [type(exc).__name__, str(exc), untouched]
    return ["none", "", True]


def _full_part(comm) -> list:
    """Rank 1 may write files of at most 4 KiB (a real limit); the part needs 1 MiB."""
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
    if rank == 1:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limits[1]))
    try:
        return _outcome(lambda: comm.shared_buffer(1 << 18, np.float32))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)


def _unusable_directory(comm) -> list:
    """Rank 1's ``RING_SHM_DIR`` names a file, not a directory."""
    if rank == 1:
        os.environ[SHM_DIR_ENV] = __file__
    try:
        return _outcome(lambda: comm.shared_buffer(100, np.float32))
    finally:
        os.environ.pop(SHM_DIR_ENV, None)


def chosen_directory() -> list[int]:
    """[parts of the allocation this rank maps from ``RING_SHM_DIR``, files left there]."""
    directory = world.bcast(tempfile.mkdtemp(prefix="ring-shm-dir-") if rank == 0 else None)
    os.environ[SHM_DIR_ENV] = directory
    try:
        with MpiRing(world) as comm:
            shared = comm.shared_buffer(5000, np.float64)
            with open("/proc/self/maps") as maps:
                mapped = {line.split(maxsplit=5)[-1] for line in maps if directory in line}
            shared[...] = rank
            comm.allreduce([shared])
            assert (shared == nodes * (nodes - 1) / 2).all()
            world.Barrier()
            left = len(os.listdir(directory))
    finally:
        os.environ.pop(SHM_DIR_ENV, None)
    world.Barrier()
    if rank == 0:
        os.rmdir(directory)
    return [len(mapped), left]


def refusals() -> dict:
    out = {}
    with MpiRing(world) as comm:
        mine = comm.shared_buffer(300, np.float32)
        other = comm.shared_buffer(300, np.float32)
        mine[...] = rank + 1
        private = np.full(300, rank + 1, np.float32)
        mixed = mine if rank == 0 else private
        out["one private"] = _outcome(lambda: comm.allreduce([mixed]), [mine, private])
        theirs = mine if rank == 0 else other
        out["two allocations"] = _outcome(lambda: comm.allreduce([theirs]), [mine, other])
        out["counts differ"] = _outcome(lambda: comm.shared_buffer(10 + (rank == 1)))
        out["negative count"] = _outcome(lambda: comm.shared_buffer(-1))
        out["object dtype"] = _outcome(lambda: comm.shared_buffer(4, object))
        out["part too large"] = _full_part(comm)
        out["directory unusable"] = _unusable_directory(comm)
        comm.allreduce([mine])  # the ring still works after every refusal
        out["works after"] = bool((mine == nodes * (nodes + 1) / 2).all())
    return out


def lifetime() -> tuple[bool, bool]:
    """The array outlives the ring; an array dropped leaves the ring's table."""
    comm = MpiRing(world)
    kept = comm.shared_buffer(1000, np.int64)
    kept[...] = rank
    comm.allreduce([kept])
    dropped = comm.shared_buffer(1000, np.int64)
    ref = weakref.ref(dropped)
    del dropped
    gc.collect()
    forgotten = ref() is None and len(comm._shared.blocks) == 1
    comm.close()
    kept += 1  # its memory is still this process's
    return bool((kept == nodes * (nodes - 1) // 2 + 1).all()), forgotten


def main() -> int:
    failures: list[str] = []
    cases, messages = every_algorithm(failures)
    cases += bound_calls(failures)
    report = {
        "rank": rank,
        "nodes": nodes,
        "cases": cases,
        "failures": failures[:10],
        "messages": messages,
        "refusals": refusals(),
    }
    report["after_close"], report["forgotten"] = lifetime()
    report["chosen"] = chosen_directory()
    prefix = f"ring-mpi-{os.getpid()}-"
    report["left"] = [n for n in os.listdir(shared_directory()) if n.startswith(prefix)]
    reports = world.gather(report, root=0)
    if rank == 0:
        print(json.dumps({"reports": reports}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
