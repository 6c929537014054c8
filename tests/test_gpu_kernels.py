"""The GPU ring's own reduction kernel, tested without a GPU.

Its CUDA source compiles unchanged as C++ once a few CUDA words are macros: g++ builds
every (dtype, op) kernel into one program (each in its own namespace) with the address,
alignment and undefined-behaviour sanitizers, and the program runs every thread of a grid
one after another.  So the source that NVRTC compiles on a GPU is what runs here, with the
head / vector / tail split, the grid-stride loops and the 16-byte vector accesses checked
(a misaligned vector access or a read past a buffer aborts the program), and its result
is compared with a float64 (or exact integer) NumPy reference on random non-zero data.
The real kernel on a device is in ``test_gpu_device.py``.
"""

from __future__ import annotations

import functools
import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from reference import reference

from ring.gpu.kernels import (
    BLOCK,
    BLOCKS_PER_SM,
    C_TYPES,
    KERNEL_OPS,
    VECTOR_BYTES,
    grid_size,
    kernel_name,
    kernel_source,
    reducer,
    vector_plan,
)

KERNELS = [(dtype, op) for dtype in C_TYPES for op in KERNEL_OPS]

HARNESS = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>
struct ring_dim3 { unsigned x; };
static ring_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
typedef void (*kernel_t)(void*, const void*, long long, long long, long long);
%(kernels)s
static const kernel_t KERNELS[] = {%(table)s};

// argv: kernel n head nvec grid block itemsize dst_offset src_offset input output
int main(int argc, char** argv) {
    if (argc != 12) return 2;
    int which = atoi(argv[1]);
    long long n = atoll(argv[2]), head = atoll(argv[3]), nvec = atoll(argv[4]);
    unsigned grid = atoi(argv[5]), block = atoi(argv[6]);
    size_t itemsize = atoi(argv[7]), dst_off = atoi(argv[8]), src_off = atoi(argv[9]);
    size_t bytes = n * itemsize;
    std::vector<char> input(2 * bytes);
    FILE* in = fopen(argv[10], "rb");
    if (!in || fread(input.data(), 1, 2 * bytes, in) != 2 * bytes) return 3;
    fclose(in);
    // Exactly the bytes each buffer needs past its offset: the address sanitizer catches
    // any access beyond them; the 64-byte base alignment makes the offsets the alignment.
    char* dst = (char*)operator new(dst_off + bytes + 1, std::align_val_t(64));
    char* src = (char*)operator new(src_off + bytes + 1, std::align_val_t(64));
    memcpy(dst + dst_off, input.data(), bytes);
    memcpy(src + src_off, input.data() + bytes, bytes);
    gridDim.x = grid; blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b)
        for (unsigned t = 0; t < block; ++t) {
            blockIdx.x = b; threadIdx.x = t;
            KERNELS[which](dst + dst_off, src + src_off, n, head, nvec);
        }
    FILE* out = fopen(argv[11], "wb");
    fwrite(dst + dst_off, 1, bytes, out);
    fclose(out);
    operator delete(dst, std::align_val_t(64));
    operator delete(src, std::align_val_t(64));
    return 0;
}
"""


@functools.cache
def _program(folder: str) -> Path:
    kernels, table = [], []
    for i, (dtype, op) in enumerate(KERNELS):
        source = kernel_source(dtype, op).replace('extern "C" ', "")
        kernels.append(f"namespace k{i} {{\n{source}\n}}")
        table.append(f"(kernel_t)k{i}::{kernel_name(dtype, op)}")
    cpp = Path(folder) / "kernels.cpp"
    cpp.write_text(HARNESS % {"kernels": "\n".join(kernels), "table": ", ".join(table)})
    exe = Path(folder) / "kernels"
    done = subprocess.run(
        ["g++", "-std=c++17", "-O1", "-Wall", "-Wno-unknown-pragmas", "-Werror",
         "-fsanitize=address,undefined,alignment", "-fno-sanitize-recover=all",
         "-o", str(exe), str(cpp)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return exe


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed (Debian: apt-get install g++)")
    return _program(str(tmp_path_factory.mktemp("kernels")))


def random_operands(rng, dtype: np.dtype, count: int) -> tuple[np.ndarray, np.ndarray]:
    if dtype.kind == "f":
        values = rng.uniform(0.5, 2.0, size=(2, count)) * rng.choice([-1, 1], size=(2, count))
    else:
        # Random bytes span the full range: sums and products overflow and must wrap.
        values = rng.integers(0, 256, size=2 * count * dtype.itemsize, dtype=np.uint8)
        values = values.view(dtype).reshape(2, count).copy()
        values[values == 0] = 1
    pair = values.astype(dtype)
    return pair[0].copy(), pair[1].copy()


def expected(op: str, dst: np.ndarray, src: np.ndarray) -> np.ndarray:
    # One operation, so float64 rounded once to the dtype is exactly what the kernel gives.
    return reference([dst, src], op).astype(dst.dtype)


def run_kernel(program, tmp_path, dtype, op, dst, src, dst_off, src_off, sms=1, block=BLOCK):
    itemsize = dtype.itemsize
    # The host's plan from the addresses the device would see (base 64-aligned).
    head, nvec, tail = vector_plan(4096 + dst_off, 8192 + src_off, dst.size, itemsize)
    grid = grid_size(head + nvec + tail, sms)
    data = tmp_path / "in.bin"
    data.write_bytes(dst.tobytes() + src.tobytes())
    out = tmp_path / "out.bin"
    which = KERNELS.index((dtype.name, op))
    args = [which, dst.size, head, nvec, grid, block, itemsize, dst_off, src_off, data, out]
    done = subprocess.run(
        [str(program), *map(str, args)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return np.frombuffer(out.read_bytes(), dtype=dtype), (head, nvec, tail)


@pytest.mark.parametrize(("dtype", "op"), KERNELS)
def test_kernel_matches_numpy_for_every_dtype_and_op(program, tmp_path, dtype, op):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(abs(hash((dtype.name, op))) % 2**32)
    count = 1000 + 3  # not a multiple of any vector width: a tail
    dst, src = random_operands(rng, dtype, count)
    if dtype.kind == "f":
        dst[5], src[9] = np.nan, np.nan  # max/min propagate NaN from either side
    got, (head, nvec, _) = run_kernel(
        program, tmp_path, dtype, op, dst, src, dtype.itemsize, dtype.itemsize
    )
    assert nvec > 0 and head > 0  # both vectors and a misaligned head ran
    np.testing.assert_array_equal(got, expected(op, dst, src))


@pytest.mark.parametrize(
    ("count", "dst_off", "src_off", "sms", "block"),
    [
        (1, 0, 0, 1, 4),
        (3, 4, 4, 1, 4),  # all head
        (4, 0, 0, 1, 1),  # one vector, one thread
        (37, 12, 12, 2, 3),  # head, vectors, tail; grid-stride with a tiny grid
        (37, 4, 8, 2, 3),  # unequally misaligned: all scalar
        (4099, 0, 0, 1, BLOCK),  # more vectors than threads
        (4099, 8, 8, 1000, BLOCK),  # more threads than work
    ],
)
def test_index_arithmetic_covers_every_element_once(
    program, tmp_path, count, dst_off, src_off, sms, block
):
    dtype = np.dtype("float32")
    rng = np.random.default_rng(count)
    dst, src = random_operands(rng, dtype, count)
    got, _ = run_kernel(program, tmp_path, dtype, "sum", dst, src, dst_off, src_off, sms, block)
    # Every element reduced exactly once: twice or never gives another sum.
    np.testing.assert_array_equal(got, expected("sum", dst, src))


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_vector_plan_parts_are_aligned_and_add_up(itemsize):
    width = VECTOR_BYTES // itemsize
    for count, offset in itertools.product([0, 1, 2, 15, 16, 17, 100], range(0, 16, itemsize)):
        head, nvec, tail = vector_plan(4096 + offset, 8192 + offset, count, itemsize)
        assert head + nvec * width + tail == count
        assert 0 <= tail < width or nvec == 0
        if nvec:
            assert (4096 + offset + head * itemsize) % VECTOR_BYTES == 0
            assert head < width
    # Unequal misalignment: nothing can be loaded as a vector from both.
    assert vector_plan(4096 + itemsize, 8192, 100, itemsize) == (100, 0, 0) or itemsize >= 16


def test_grid_is_sized_from_the_multiprocessors():
    assert grid_size(0, 132) == 1
    assert grid_size(BLOCK * 3, 132) == 3
    assert grid_size(10**9, 132) == 132 * BLOCKS_PER_SM


def test_sources_differ_by_dtype_and_op_and_refuse_what_they_cannot_cover():
    assert "typedef float T;" in kernel_source("float32", "sum")
    assert "T v[4];" in kernel_source("float32", "sum")
    assert "T v[2];" in kernel_source("float64", "max")
    assert "(U)a * (U)b" in kernel_source("int32", "prod")
    assert len({kernel_source(d, o) for d, o in KERNELS}) == len(KERNELS)
    for dtype in ("complex64", "float16", "bool"):
        with pytest.raises(ValueError, match="no ring kernel"):
            kernel_source(dtype, "sum")


def test_dispatch_falls_back_to_the_ufunc_where_the_kernel_does_not_cover():
    from fakecuda import FakeCuda, fake_cupy

    with fake_cupy(FakeCuda(1)) as cp:
        assert reducer(cp, "sum", np.float32).kind == "ring"
        assert reducer(cp, "max", np.int8).kind == "ring"
        assert reducer(cp, "sum", np.complex64).kind == "ufunc"
        assert reducer(cp, "prod", np.float16).kind == "ufunc"
        assert reducer(cp, "sum", np.float32, kernel="ufunc").kind == "ufunc"
        with pytest.raises(TypeError, match="not defined for complex"):
            reducer(cp, "max", np.complex64)
        with pytest.raises(ValueError, match="kernel must be"):
            reducer(cp, "sum", np.float32, kernel="fast")


@pytest.mark.parametrize(("dtype", "kind"), [(np.float32, "ring"), (np.complex64, "ufunc")])
@pytest.mark.parametrize("force", [False, True])
def test_the_ring_reduces_with_our_kernel_and_falls_back_to_the_ufunc(dtype, kind, force):
    from fakecuda import FakeCuda, fake_cupy
    from reference import check, random_inputs

    from ring.gpu import GpuCommunicator

    rng = np.random.default_rng(3)
    sim = FakeCuda(1, seed=2)
    with fake_cupy(sim):
        comm = GpuCommunicator(4, shared_devices=True, force_peer_copies=force)
        # 1001 elements: chunk starts at every alignment, so some chunks run all scalar
        inputs = random_inputs(rng, 4, 1001, dtype, "sum")
        buffers = [sim.to_device(x, 0) for x in inputs]
        comm.allreduce(buffers, "sum")
        for buf in buffers:
            check(sim.to_host(buf), inputs, "sum")
    launched = {name for name, _, _ in sim.launches}
    assert launched == ({f"ring_reduce_sum_{np.dtype(dtype).name}"} if kind == "ring" else set())
    # 12 reduce-scatter steps in all (3 per node), each one launch; grids within 4 SMs x 8
    assert len(sim.launches) == (12 if kind == "ring" else 0)
    assert all(
        1 <= grid[0] <= 4 * BLOCKS_PER_SM and block == (BLOCK,) for _, grid, block in sim.launches
    )
