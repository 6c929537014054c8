"""Run under ``mpirun -n N`` (N >= 2): bad input raises the same error on every rank.

For each scenario every rank makes its call, catches the error and checks that its buffer
is untouched; rank 0 gathers what each rank saw and prints one JSON object
``{"nodes", "scenarios": {name: [[type, message, untouched], ...per rank]}, "after": ok}``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from mpi4py import MPI

import ring
import ring.mpi
from ring.mpi import MpiRing

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()


class FakeDeviceArray:
    """Looks like a CUDA array to the backend (it carries ``__cuda_array_interface__``)."""

    def __init__(self):
        self.__cuda_array_interface__ = {
            "shape": (8,),
            "typestr": "<f4",
            "data": (0, False),
            "version": 3,
        }
        self.dtype = np.dtype(np.float32)
        self.shape = (8,)


def base(count=11, dtype=np.float64):
    return (np.arange(count) % 7 + 1 + rank).astype(dtype)


def raised(call) -> list:
    """``[type name, message]`` of what ``call()`` raised on this rank, or ``["no error", ""]``."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - what each rank saw is the result
        return [type(exc).__name__, str(exc)]
    return ["no error", ""]


def run(comm, name, call, buf):
    before = buf.copy() if isinstance(buf, np.ndarray) else None
    seen = raised(call)
    untouched = before is None or np.array_equal(buf, before)
    return world.gather([*seen, bool(untouched)], root=0)


def main() -> int:
    comm = MpiRing(world)
    results = {}

    def scenario(name, make_call):
        buf, call = make_call()
        results[name] = run(comm, name, call, buf)

    def lengths():
        buf = base(11 + (rank == nodes - 1))
        return buf, lambda: comm.allreduce([buf])

    def dtypes():
        buf = base(11, np.float32 if rank == 1 else np.float64)
        return buf, lambda: comm.allreduce([buf])

    def ops():
        buf = base()
        return buf, lambda: comm.allreduce([buf], "max" if rank == 1 else "sum")

    def collectives():
        buf = base()
        return buf, (lambda: comm.all_gather([buf])) if rank == 1 else (
            lambda: comm.allreduce([buf])
        )

    def one_rank_not_contiguous():
        full = base(22)
        buf = full[::2] if rank == 1 else full[:11]
        return full, lambda: comm.allreduce([buf])

    def one_rank_two_buffers():
        buf = base()
        buffers = [buf, base()] if rank == 1 else [buf]
        return buf, lambda: ring.allreduce(buffers, backend="mpi")

    def unknown_op():
        buf = base()
        return buf, lambda: comm.allreduce([buf], "mean")

    def complex_max():
        buf = base(11, np.complex128)
        return buf, lambda: comm.allreduce([buf], "max")

    def bare_array():
        buf = base()
        return buf, lambda: comm.allreduce(buf)

    def device_not_cuda_aware():
        buf = base()
        device = FakeDeviceArray()
        return buf, lambda: comm.allreduce([device] if rank == 0 else [buf])

    def device_without_cupy():
        buf = base()
        device = FakeDeviceArray()
        return buf, lambda: comm.allreduce([device] if rank == 0 else [buf])

    scenario("lengths", lengths)
    scenario("dtypes", dtypes)
    scenario("ops", ops)
    scenario("collectives", collectives)
    scenario("one_rank_not_contiguous", one_rank_not_contiguous)
    scenario("one_rank_two_buffers", one_rank_two_buffers)
    scenario("unknown_op", unknown_op)
    scenario("complex_max", complex_max)
    scenario("bare_array", bare_array)
    if ring.mpi.cuda_aware()[0]:
        os.environ[ring.mpi.CUDA_AWARE_ENV] = "0"  # this library is: pretend otherwise
        ring.mpi.cuda_aware.cache_clear()
    scenario("device_not_cuda_aware", device_not_cuda_aware)
    os.environ.pop(ring.mpi.CUDA_AWARE_ENV, None)
    ring.mpi.cuda_aware.cache_clear()
    # Pretend the library is CUDA-aware to reach the next check, and CuPy is not installed.
    os.environ[ring.mpi.CUDA_AWARE_ENV] = "1"
    ring.mpi.cuda_aware.cache_clear()
    saved, sys.modules["cupy"] = sys.modules.get("cupy"), None
    scenario("device_without_cupy", device_without_cupy)
    if saved is None:
        del sys.modules["cupy"]
    else:
        sys.modules["cupy"] = saved
    del os.environ[ring.mpi.CUDA_AWARE_ENV]
    ring.mpi.cuda_aware.cache_clear()

    def unpicklable_error():
        # A local exception class cannot be pickled; the error must still reach every rank.
        class LocalError(ValueError):
            pass

        class Buffers(list):
            def __len__(self):
                raise LocalError("raised on rank 1 only")

        buf = base()
        buffers = Buffers([buf]) if rank == 1 else [buf]
        return buf, lambda: comm.allreduce(buffers)

    scenario("unpicklable_error", unpicklable_error)

    def op_none_everywhere():
        buf = base()
        return buf, lambda: comm.allreduce([buf], None)

    def op_none_on_one_rank():
        buf = base()
        return buf, lambda: comm.allreduce([buf], None if rank == 1 else "min")

    def segment_negative_on_one_rank_api():
        buf = base()
        segment = -1 if rank == 1 else 1 << 20
        return buf, lambda: ring.allreduce([buf], backend="mpi", segment_bytes=segment)

    def segment_differs_api():
        buf = base(4099)
        segment = 64 * (rank + 1)
        return buf, lambda: ring.allreduce([buf], backend="mpi", segment_bytes=segment)

    def segment_negative_on_one_rank_ctor():
        buf = base()
        return buf, lambda: MpiRing(world, segment_bytes=-1 if rank == 1 else 1 << 20)

    def segment_differs_ctor():
        buf = base()
        return buf, lambda: MpiRing(world, segment_bytes=64 * (rank + 1))

    scenario("op_none_everywhere", op_none_everywhere)
    scenario("op_none_on_one_rank", op_none_on_one_rank)
    # The API caches one ring per communicator: a good call first, so the bad ones below
    # meet a cached ring on every rank.
    good = base()
    ring.allreduce([good], backend="mpi")
    scenario("segment_negative_on_one_rank_api", segment_negative_on_one_rank_api)
    scenario("segment_differs_api", segment_differs_api)
    scenario("segment_negative_on_one_rank_ctor", segment_negative_on_one_rank_ctor)
    scenario("segment_differs_ctor", segment_differs_ctor)

    # After all that the same communicator still works.
    buf = np.full(13, rank + 1, dtype=np.int64)
    comm.allreduce([buf])
    after = world.gather(bool((buf == nodes * (nodes + 1) // 2).all()), root=0)
    comm.close()
    closed = run(comm, "closed", lambda: comm.allreduce([buf]), buf)
    if rank == 0:
        results["closed"] = closed
        print(json.dumps({"nodes": nodes, "scenarios": results, "after": all(after)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
