"""Inputs and validation, computed by the harness without the code under test.

Each node's input is drawn from its own random stream, seeded by ``(seed, nodes, count,
node)``: every size gets fresh data, and every backend (and every MPI rank, which draws
only what it needs) sees the same inputs for the same point.  Values are non-zero and
positive (floats in [0.5, 1.5), integers in [1, 100]), so a sum has no cancellation and
a missing or doubled contribution is far outside the rounding tolerance.

The reference is the element-wise reduction in a wide type (float64, complex128, int64
or uint64) with plain NumPy.  Integers compare exactly after casting the reference back
(both wrap modulo 2**bits); floats compare with a relative tolerance of 2·N·eps of the
dtype, above the rounding error of any summation order over N terms (about (N-1)·eps/2)
and below the smallest wrong result the inputs allow (one input missing: 1/(3N)).  Below
the dtype's smallest normal number (``finfo.tiny``: 6.1e-5 for float16, which a product of
a few hundred inputs reaches) a dtype has no relative precision left, only subnormal steps,
so every float comparison also allows an absolute error of ``tiny``; above the normal range
that allowance is far below the relative one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..ops import AVERAGING, resolve_op

__all__ = ["count_wrong", "make_input", "reference", "tolerance"]

# Validation works through blocks of this many elements so its temporaries stay small.
_BLOCK = 1 << 20


def _rng(seed: int, nodes: int, count: int, node: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, nodes, count, node]))


def make_input(seed: int, nodes: int, count: int, dtype: np.dtype, node: int) -> np.ndarray:
    """The input of ``node`` for one point: ``count`` random non-zero elements."""
    dtype = np.dtype(dtype)
    rng = _rng(seed, nodes, count, node)
    if dtype.kind in "iu":
        high = min(100, np.iinfo(dtype).max)
        return rng.integers(1, high, size=count, dtype=dtype, endpoint=True)
    if dtype.kind == "f":
        real = np.float32 if dtype.itemsize <= 4 else np.float64
        values = rng.random(count, dtype=real)
        values += 0.5
        return values.astype(dtype, copy=False)
    if dtype.kind == "c":
        real = np.float32 if dtype.itemsize <= 8 else np.float64
        values = np.empty(count, dtype=dtype)
        values.real = rng.random(count, dtype=real) + 0.5
        values.imag = rng.random(count, dtype=real) + 0.5
        return values
    raise TypeError(f"dtype {dtype} has no input generator")


_WIDE = {"i": np.int64, "u": np.uint64, "f": np.float64, "c": np.complex128}


def _wide(dtype: np.dtype) -> np.dtype:
    wide = np.dtype(_WIDE[dtype.kind])
    # long double is already wider than float64
    return dtype if dtype.itemsize > wide.itemsize else wide


def reference(
    seed: int,
    nodes: int,
    count: int,
    dtype: np.dtype,
    op: str,
    known: Mapping[int, np.ndarray] | None = None,
) -> np.ndarray:
    """The reduction of all ``nodes`` inputs in the wide type.

    ``known`` maps node -> input already in memory; the others are drawn again, one at a
    time, so an MPI rank holding one input needs memory for two, not for N.  ``avg`` is the
    sum divided by ``nodes``; for integers the sum wrapped to the dtype, divided with the
    quotient truncated toward zero (exact in float64 for these inputs, which stay below
    100 per node).
    """
    dtype = np.dtype(dtype)
    ufunc = resolve_op(op, dtype)
    known = known or {}
    result = None
    for node in range(nodes):
        values = known.get(node)
        if values is None:
            values = make_input(seed, nodes, count, dtype, node)
        if result is None:
            result = values.astype(_wide(dtype))
        else:
            with np.errstate(over="ignore"):
                ufunc(result, values, out=result, casting="unsafe")
    if result is None:
        raise ValueError(f"nothing to reduce: nodes must be at least 1, got {nodes}")
    if op in AVERAGING and result is not None:
        if dtype.kind in "iu":
            wrapped = result.astype(dtype).astype(np.float64)
            return np.trunc(wrapped / nodes).astype(result.dtype)
        return result / nodes
    return result


def tolerance(dtype: np.dtype, nodes: int) -> float:
    """Relative tolerance for floating results; 0 (exact) for integers."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return 0.0
    return 2.0 * max(nodes, 1) * float(np.finfo(dtype).eps)


def count_wrong(result: np.ndarray, expected: np.ndarray, rtol: float) -> int:
    """Elements of ``result`` that differ from the wide ``expected`` by more than ``rtol``
    (relative) plus the dtype's smallest normal number (absolute); NaN and inf always count
    as wrong."""
    if result.shape != expected.shape:
        raise ValueError(f"result has shape {result.shape}, expected {expected.shape}")
    wrong = 0
    exact = result.dtype.kind in "iu"
    tiny = 0.0 if exact else float(np.finfo(result.dtype).tiny)
    for start in range(0, result.shape[0], _BLOCK):
        got = result[start : start + _BLOCK]
        want = expected[start : start + _BLOCK]
        if exact:
            wrong += int(np.count_nonzero(got != want.astype(result.dtype)))
        else:
            with np.errstate(invalid="ignore", over="ignore"):
                ok = np.abs(got.astype(want.dtype) - want) <= rtol * np.abs(want) + tiny
            wrong += int(ok.size - np.count_nonzero(ok))
    return wrong


def count_wrong_all(results: Sequence[np.ndarray], expected: np.ndarray, rtol: float) -> int:
    return sum(count_wrong(result, expected, rtol) for result in results)


# Each timed call is checked on this many windows of this many elements (the full
# comparison runs on the last call).  Contiguous windows cost a device one copy each.
SAMPLE_WINDOWS = 6
SAMPLE_WINDOW = 16


def sample_windows(seed: int, count: int) -> list[tuple[int, int]]:
    """Where every timed call's result is checked: the first and the last elements and
    random windows between (chunk boundaries move with N; random windows find any region)."""
    if count == 0:
        return []
    width = min(SAMPLE_WINDOW, count)
    rng = np.random.default_rng(np.random.SeedSequence([seed, count, 0x5A4D]))
    starts = {0, count - width, *rng.integers(0, count - width + 1, SAMPLE_WINDOWS - 2).tolist()}
    windows: list[tuple[int, int]] = []
    for start in sorted(starts):  # overlapping windows merged: no element counted twice
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], start + width))
        else:
            windows.append((int(start), int(start) + width))
    return windows


def gather_windows(values, windows: Sequence[tuple[int, int]]) -> np.ndarray:
    """The elements of a host array in ``windows``, as one array."""
    return np.concatenate([np.asarray(values[a:b]) for a, b in windows])
