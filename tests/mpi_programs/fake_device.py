"""Run under ``mpirun -n N``: the device-buffer path of ``ring.mpi`` on a fake CuPy.

No GPU is needed: the fake ``cupy`` module below keeps its arrays in host memory and
exposes them to mpi4py through ``__cuda_array_interface__``, as CuPy does, so a
non-CUDA-aware MPI can move them.  Its ufuncs do not run when called: they are queued on
the "stream" and run at ``synchronize()``, as a GPU runs kernels asynchronously, so a
missing synchronisation before MPI reads a chunk shows up as a wrong result.  Rank 0
prints one JSON line ``{"nodes", "reports": [{"rank", "cases", "failures"}, ...]}``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpi4py import MPI
from reference import check, random_inputs

import ring.mpi
from ring.mpi import MpiRing
from ring.schedule import chunk_range, owned_chunk

_queue: list = []


class _Device:
    id = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


class _Flags:
    def __init__(self, array):
        self.c_contiguous = array.flags.c_contiguous


class FakeDeviceArray:
    def __init__(self, array: np.ndarray):
        self._host = array
        self.dtype, self.shape, self.ndim = array.dtype, array.shape, array.ndim
        self.nbytes, self.size = array.nbytes, array.size
        self.flags = _Flags(array)
        self.device = _Device()

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self._host.ctypes.data, False),
            "strides": None,
            "version": 3,
        }

    def __getitem__(self, key):
        return FakeDeviceArray(self._host[key])

    def view(self, dtype):
        return FakeDeviceArray(self._host.view(dtype))


def _deferred(ufunc):
    def call(a, b, out):
        _queue.append(lambda: ufunc(a._host, b._host, out=out._host))
        return out

    return call


def _synchronize():
    while _queue:
        _queue.pop(0)()


cupy = types.ModuleType("cupy")
cupy.ndarray = FakeDeviceArray
cupy.empty = lambda n, dtype: FakeDeviceArray(np.empty(n, dtype=dtype))
cupy.add, cupy.multiply = _deferred(np.add), _deferred(np.multiply)
cupy.maximum, cupy.minimum = _deferred(np.maximum), _deferred(np.minimum)
cupy.cuda = types.SimpleNamespace(
    get_current_stream=lambda: types.SimpleNamespace(synchronize=_synchronize)
)


def to_device(array):
    return FakeDeviceArray(array.copy())


def to_host(device_array):
    _synchronize()
    return device_array._host.copy()


def main() -> int:
    sys.modules["cupy"] = cupy
    os.environ[ring.mpi.CUDA_AWARE_ENV] = "1"
    ring.mpi.cuda_aware.cache_clear()
    world = MPI.COMM_WORLD
    rank, nodes = world.Get_rank(), world.Get_size()
    failures, cases, seed = [], 0, 0

    def checked(label, fn, *args):
        # A failed check must not skip a later collective: the ranks would fall out of step.
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - reported, the run goes on
            failures.append(f"{label}: {traceback.format_exc(limit=3)}")

    for segment_bytes in (0, 24):
        with MpiRing(world, segment_bytes=segment_bytes) as comm:
            for dtype in (np.float64, np.int32, np.complex64):
                for count in (1, nodes + 1, 97, 1000):
                    for op in ("sum", "prod") + (("max",) if dtype != np.complex64 else ()):
                        seed += 1
                        cases += 1
                        label = f"seg={segment_bytes} {np.dtype(dtype).name} n={count} {op}"
                        rng = np.random.default_rng(seed)
                        inputs = random_inputs(rng, nodes, count, dtype, op)
                        buf = to_device(inputs[rank])
                        comm.allreduce([buf], op)
                        checked(f"allreduce {label}", check, to_host(buf), inputs, op)

                        buf = to_device(inputs[rank])
                        comm.reduce_scatter([buf], op)
                        a, b = chunk_range(count, nodes, owned_chunk(rank, nodes))
                        owned = [x[a:b] for x in inputs]
                        checked(f"reduce_scatter {label}", check, to_host(buf)[a:b], owned, op)
                        comm.all_gather([buf])
                        checked(f"all_gather {label}", check, to_host(buf), inputs, op)
    reports = world.gather({"rank": rank, "cases": cases, "failures": failures[:10]}, root=0)
    if rank == 0:
        print(json.dumps({"nodes": nodes, "reports": reports}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
