"""Independent references for the collectives: float64 NumPy for floating and complex
data, exact Python integers (wrapped to the dtype's width) for integers."""

from __future__ import annotations

import functools
import operator

import numpy as np

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float16, np.float32, np.float64, np.longdouble]
COMPLEX_DTYPES = [np.complex64, np.complex128, np.clongdouble]
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES + COMPLEX_DTYPES
OPS = ["sum", "prod", "max", "min", "avg"]
BITWISE = ["band", "bor", "bxor"]


def ops_for(dtype) -> list[str]:
    """The arithmetic ops the dtype allows (bool: the ops ring.ops allows it, bitwise too)."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return ["max", "min", *BITWISE]
    return ["sum", "prod", "avg"] if kind == "c" else OPS


def random_inputs(rng: np.random.Generator, nodes: int, count: int, dtype, op: str):
    """Random non-zero data; products stay far from overflow and underflow."""
    dtype = np.dtype(dtype)
    out = []
    for _ in range(nodes):
        if dtype.kind == "b":
            out.append(rng.integers(0, 2, size=count).astype(bool))
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            if op == "prod":
                values = rng.choice(
                    [1, 2, 3] if dtype.kind == "u" else [-3, -2, -1, 1, 2, 3], size=count
                )
            else:
                values = rng.integers(
                    max(info.min, -(2**40)), min(info.max, 2**40), size=count, endpoint=True
                )
                values[values == 0] = 1
            out.append(values.astype(dtype))
        else:
            # Products of up to 64 factors must stay finite and normal even in float16.
            low, high = (0.8, 1.25) if op == "prod" else (0.5, 2.0)
            if dtype.kind == "c" and op == "prod":
                low, high = 0.6, 0.9

            def signed(low=low, high=high):
                return rng.choice([-1.0, 1.0], size=count) * rng.uniform(low, high, size=count)

            values = signed() + 1j * signed() if dtype.kind == "c" else signed()
            out.append(values.astype(dtype))
    return out


_INT_REDUCE = {"sum": operator.add, "prod": operator.mul, "max": max, "min": min}
_INT_REDUCE |= {"band": operator.and_, "bor": operator.or_, "bxor": operator.xor}
_FLOAT_REDUCE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _truncated_average(total: int, nodes: int) -> int:
    """An integer sum divided by N, the quotient truncated toward zero (C, NCCL)."""
    quotient = abs(total) // nodes
    return -quotient if total < 0 else quotient


def reference(inputs, op: str) -> np.ndarray:
    dtype = inputs[0].dtype
    if op == "avg":
        total = reference(inputs, "sum")
        if dtype.kind in "iu":
            # The sum wraps in the dtype as "sum" does; then it is divided.
            averaged = [_truncated_average(int(v), len(inputs)) for v in total.tolist()]
            return np.array(averaged, dtype=np.int64 if dtype.kind == "i" else np.uint64).astype(
                dtype
            )
        return total / len(inputs)
    if dtype.kind == "b":  # bool as Python's: max is any, min is all, bitwise as for ints
        rows = [a.tolist() for a in inputs]
        exact = [functools.reduce(_INT_REDUCE[op], column) for column in zip(*rows, strict=True)]
        return np.array(exact, dtype=bool)
    if dtype.kind in "iu":
        bits = dtype.itemsize * 8
        rows = [a.tolist() for a in inputs]
        exact = [functools.reduce(_INT_REDUCE[op], column) for column in zip(*rows, strict=True)]
        wrapped = [v % (1 << bits) for v in exact]
        return np.array(wrapped, dtype=np.uint64).astype(dtype)
    wide = np.complex128 if dtype.kind == "c" else np.float64
    stack = np.stack([a.astype(wide) for a in inputs])
    return _FLOAT_REDUCE[op].reduce(stack, axis=0)


def check(result: np.ndarray, inputs, op: str) -> None:
    """Compare a backend's result with :func:`reference`: integers and max/min exactly,
    floating sums within the rounding of N additions, products within N roundings."""
    expected = reference(inputs, op)
    if result.dtype.kind in "iub" or op in ("max", "min"):
        np.testing.assert_array_equal(result, expected.astype(result.dtype))
        return
    nodes = len(inputs)
    # The reference is float64, so long double results are held to float64 rounding.
    eps = max(float(np.finfo(result.dtype).eps), float(np.finfo(np.float64).eps))
    if op in ("sum", "avg"):
        magnitude = np.sum([np.abs(a.astype(np.complex128)) for a in inputs], axis=0)
        if op == "avg":  # the sum's rounding, scaled by 1/N, plus the division's own
            magnitude = magnitude / nodes
        tolerance = (2 * nodes + 1) * eps * magnitude
        error = np.abs(result.astype(np.complex128) - expected)
    else:
        tolerance = 4 * nodes * eps
        error = np.abs(result.astype(np.complex128) - expected) / np.abs(expected)
    bad = np.flatnonzero(error > tolerance)
    assert bad.size == 0, (
        f"{bad.size} wrong elements, first at {bad[0]}: {result[bad[0]]} vs {expected[bad[0]]}"
        if bad.size
        else ""
    )
