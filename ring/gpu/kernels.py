"""The GPU ring's reduction kernel: ``dst = op(dst, src)`` over one chunk, our own.

CuPy's elementwise ufunc moves bytes well below what the device copy does: it indexes
element by element and sizes its grid from the element count.  This kernel does what a
memory-bound kernel needs instead:

* **16-byte vector loads and stores.**  Each thread moves ``16 / itemsize`` elements per
  load (``ld.global.v4``), four times fewer memory instructions for float32.  They need
  16-byte aligned addresses, so the chunk is split into a scalar *head* (elements up to the
  first address where both ``dst`` and ``src`` are aligned), whole vectors, and a scalar
  *tail*.  When ``dst`` and ``src`` are not equally misaligned no split aligns both, and
  the whole chunk runs scalar.  :func:`vector_plan` does this arithmetic on the host.
* **A grid sized from the multiprocessor count** (a grid-stride loop): enough blocks to
  fill every multiprocessor, no more, so small chunks launch few blocks and large ones do
  not pay for millions of block launches.
* **Templated on dtype and op** by text: one kernel per (dtype, op), compiled by NVRTC the
  first time it runs on a device and cached by CuPy.

What it does not cover (complex, bool and float16 dtypes) falls back to CuPy's ufunc;
:func:`reducer` says which of the two a (dtype, op) gets.  The source compiles as plain
C++ too (``tests/test_gpu_kernels.py`` builds it with g++ and runs every thread of a
small grid), so the index arithmetic is tested without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ops import accumulating_op, resolve_op

__all__ = [
    "BLOCK",
    "BLOCKS_PER_SM",
    "C_TYPES",
    "KERNEL_OPS",
    "VECTOR_BYTES",
    "Reducer",
    "grid_size",
    "kernel_name",
    "kernel_source",
    "reducer",
    "vector_plan",
]

VECTOR_BYTES = 16
BLOCK = 256
# 8 blocks of 256 threads fill an SM's 2048 thread slots on every GPU since Volta.
BLOCKS_PER_SM = 8

# dtype -> (C type, unsigned C type of the same width for wrap-around integer arithmetic).
C_TYPES = {
    "int8": ("signed char", "unsigned char"),
    "uint8": ("unsigned char", "unsigned char"),
    "int16": ("short", "unsigned short"),
    "uint16": ("unsigned short", "unsigned short"),
    "int32": ("int", "unsigned int"),
    "uint32": ("unsigned int", "unsigned int"),
    "int64": ("long long", "unsigned long long"),
    "uint64": ("unsigned long long", "unsigned long long"),
    "float32": ("float", None),
    "float64": ("double", None),
}

# op -> C expression of a and b.  Integers add and multiply in the unsigned type, so they
# wrap as NumPy does instead of overflowing a signed type (undefined in C++).  max and min
# propagate NaN as NumPy's maximum/minimum do: a NaN in a wins by the a != a test, a NaN in
# b wins because every comparison with it is false.
_EXPRESSIONS = {
    "sum": ("a + b", "(T)((U)a + (U)b)"),
    "prod": ("a * b", "(T)((U)a * (U)b)"),
    "max": ("(a > b || a != a) ? a : b", "(a > b) ? a : b"),
    "min": ("(a < b || a != a) ? a : b", "(a < b) ? a : b"),
}

# The ops the kernel computes; avg accumulates with sum's kernel (see ring.ops).
KERNEL_OPS = tuple(_EXPRESSIONS)

_TEMPLATE = r"""
typedef {ctype} T;
typedef {utype} U;
struct alignas(16) ring_vec {{ T v[{width}]; }};

__device__ __forceinline__ T ring_op(T a, T b) {{ return {expression}; }}

// dst[i] = op(dst[i], src[i]) for i < n: scalar head [0, head), then nvec 16-byte vectors
// from element head, then the scalar tail; every part a grid-stride loop.
extern "C" __global__ void {name}(T* __restrict__ dst, const T* __restrict__ src,
                                  long long n, long long head, long long nvec) {{
    long long stride = (long long)gridDim.x * blockDim.x;
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    ring_vec* vdst = (ring_vec*)(dst + head);
    const ring_vec* vsrc = (const ring_vec*)(src + head);
    for (long long k = first; k < nvec; k += stride) {{
        ring_vec x = vdst[k];
        const ring_vec y = vsrc[k];
#pragma unroll
        for (int j = 0; j < {width}; ++j) x.v[j] = ring_op(x.v[j], y.v[j]);
        vdst[k] = x;
    }}
    long long body = head + nvec * {width};
    long long scalars = head + (n - body);
    for (long long k = first; k < scalars; k += stride) {{
        long long i = k < head ? k : body + (k - head);
        dst[i] = ring_op(dst[i], src[i]);
    }}
}}
"""


def _kernel_dtype(dtype) -> str | None:
    name = np.dtype(dtype).name
    return name if name in C_TYPES else None


def kernel_name(dtype, op: str) -> str:
    return f"ring_reduce_{op}_{np.dtype(dtype).name}"


def kernel_source(dtype, op: str) -> str:
    """The CUDA source of the kernel for (dtype, op); ValueError for what it cannot cover."""
    name = _kernel_dtype(dtype)
    if name is None or op not in _EXPRESSIONS:
        raise ValueError(f"no ring kernel for op {op!r} on {np.dtype(dtype).name}")
    ctype, utype = C_TYPES[name]
    floating, integral = _EXPRESSIONS[op]
    return _TEMPLATE.format(
        ctype=ctype,
        utype=utype or ctype,
        width=VECTOR_BYTES // np.dtype(dtype).itemsize,
        expression=integral if utype else floating,
        name=kernel_name(dtype, op),
    )


def vector_plan(dst_ptr: int, src_ptr: int, count: int, itemsize: int) -> tuple[int, int, int]:
    """(head, vectors, tail) elements for a chunk at these addresses.

    ``head + vectors * (16 // itemsize) + tail == count``; the vectors start at an address
    aligned to 16 bytes in both ``dst`` and ``src``.  Unequally misaligned pointers (or
    pointers not aligned to the element size) give ``(count, 0, 0)``: all scalar.
    """
    width = VECTOR_BYTES // itemsize
    offset = dst_ptr % VECTOR_BYTES
    if offset != src_ptr % VECTOR_BYTES or offset % itemsize:
        return count, 0, 0
    head = min(count, ((VECTOR_BYTES - offset) % VECTOR_BYTES) // itemsize)
    vectors = (count - head) // width
    return head, vectors, count - head - vectors * width


def grid_size(work_items: int, multiprocessors: int) -> int:
    """Blocks for ``work_items`` threads' worth of work: enough to fill every
    multiprocessor, never more than the work needs, at least one."""
    needed = -(-work_items // BLOCK)
    return max(1, min(needed, multiprocessors * BLOCKS_PER_SM))


@dataclass
class Reducer:
    """``reducer(dst, src, stream)`` queues ``dst = op(dst, src)`` on ``stream``.

    ``kind`` is ``"ring"`` (our kernel) or ``"ufunc"`` (CuPy's, the fallback).
    """

    cupy: Any
    dtype: np.dtype
    op: str
    kind: str
    _ufunc: Any = None
    _kernel: Any = None
    _multiprocessors: dict[int, int] = field(default_factory=dict)

    def __call__(self, dst, src, stream) -> None:
        if self.kind == "ufunc":
            with stream:
                self._ufunc(dst, src, out=dst)
            return
        count = dst.size
        head, vectors, tail = vector_plan(dst.data.ptr, src.data.ptr, count, self.dtype.itemsize)
        blocks = grid_size(vectors + head + tail, self._sms(dst.device.id))
        with stream:
            self._kernel(
                (blocks,),
                (BLOCK,),
                (dst, src, np.int64(count), np.int64(head), np.int64(vectors)),
            )

    def _sms(self, device: int) -> int:
        known = self._multiprocessors
        if device not in known:
            props = self.cupy.cuda.runtime.getDeviceProperties(device)
            known[device] = int(props["multiProcessorCount"])
        return known[device]


def reducer(cupy, op: object, dtype, *, kernel: str = "ring") -> Reducer:
    """The reduction for (op, dtype): our kernel where it covers them, else CuPy's ufunc.

    ``kernel="ufunc"`` asks for CuPy's ufunc (the harness measures both).  Raises what
    :func:`ring.ops.resolve_op` raises for an op the dtype does not allow.  ``avg`` gets
    sum's reduction: dividing by the number of nodes is the ring's, once per range.
    """
    if kernel not in ("ring", "ufunc"):
        raise ValueError(f"kernel must be 'ring' or 'ufunc', got {kernel!r}")
    dtype = np.dtype(dtype)
    ufunc = getattr(cupy, resolve_op(op, dtype).__name__)
    assert isinstance(op, str)  # resolve_op accepts nothing else
    op = accumulating_op(op)
    if kernel == "ufunc" or op not in KERNEL_OPS or _kernel_dtype(dtype) is None:
        return Reducer(cupy, dtype, op, "ufunc", _ufunc=ufunc)
    raw = cupy.RawKernel(kernel_source(dtype, op), kernel_name(dtype, op))
    return Reducer(cupy, dtype, op, "ring", _kernel=raw)
