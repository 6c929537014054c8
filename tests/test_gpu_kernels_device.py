"""Our reduction kernel (:mod:`ring.gpu.kernels`) on a real CUDA device, against float64
(or exact integer) references; skipped, with the reason, where there is no GPU.

``test_gpu_kernels.py`` runs the same source as C++ on the host; here NVRTC compiles it
and the device runs it, with chunks at every alignment (vector head and tail, and unequally
misaligned operands that run all scalar).
"""

from __future__ import annotations

import numpy as np
import pytest
from reference import reference

import ring
from ring._optional import MissingDependencyError
from ring.gpu import DeviceUnavailableError
from ring.gpu.kernels import C_TYPES, KERNEL_OPS, reducer

try:
    ring.gpu.device_count()
    cp = ring.gpu.import_cupy()
except (MissingDependencyError, DeviceUnavailableError) as exc:
    pytest.skip(f"no GPU to test on: {exc}", allow_module_level=True)

pytestmark = pytest.mark.gpu


def operands(rng, dtype: np.dtype, count: int):
    if dtype.kind == "f":
        values = rng.uniform(0.5, 2.0, size=(2, count)) * rng.choice([-1, 1], size=(2, count))
        return values.astype(dtype)
    raw = rng.integers(0, 256, size=2 * count * dtype.itemsize, dtype=np.uint8)
    values = raw.view(dtype).reshape(2, count).copy()
    values[values == 0] = 1
    return values


@pytest.mark.parametrize("op", list(KERNEL_OPS))
@pytest.mark.parametrize("dtype", list(C_TYPES))
def test_kernel_matches_the_reference_at_every_alignment(dtype, op):
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(len(dtype.name) * 7 + len(op))
    kernel = reducer(cp, op, dtype)
    assert kernel.kind == "ring"
    stream = cp.cuda.Stream(non_blocking=True)
    for count in (1, 15, 1000, (1 << 20) + 3):
        for dst_off, src_off in ((0, 0), (1, 1), (3, 3), (1, 2)):
            host = operands(rng, dtype, count + 3)
            dst_full, src_full = cp.asarray(host[0]), cp.asarray(host[1])
            dst = dst_full[dst_off : dst_off + count]
            src = src_full[src_off : src_off + count]
            kernel(dst, src, stream)
            stream.synchronize()
            want = host[0].copy()
            want[dst_off : dst_off + count] = reference(
                [host[0][dst_off : dst_off + count], host[1][src_off : src_off + count]], op
            ).astype(dtype)
            # Elements outside the view stay untouched.
            np.testing.assert_array_equal(cp.asnumpy(dst_full), want)


def test_nan_propagates_through_max_and_min():
    kernel_max = reducer(cp, "max", np.float32)
    kernel_min = reducer(cp, "min", np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    a = np.array([np.nan, 1, 2, 3, 4, 5, 6, 7, 8], np.float32)
    b = np.array([1, np.nan, 2, 3, 4, 5, 6, 7, 8], np.float32)
    for kernel, ufunc in ((kernel_max, np.maximum), (kernel_min, np.minimum)):
        dst, src = cp.asarray(a), cp.asarray(b)
        kernel(dst, src, stream)
        stream.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(dst), ufunc(a, b))
