"""Reduction operators and the dtypes they accept."""

from __future__ import annotations

import numpy as np

__all__ = ["OPS", "check_dtype", "resolve_op"]

# Each op is the NumPy ufunc a backend applies with ``out=`` when a chunk arrives.
OPS: dict[str, np.ufunc] = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}

# Integer (signed and unsigned), floating and complex dtypes.
SUPPORTED_KINDS = "iufc"


def check_dtype(dtype: np.dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in SUPPORTED_KINDS:
        raise TypeError(
            f"dtype {dtype} is not supported: use an integer, floating or complex dtype"
        )
    return dtype


def resolve_op(op: object, dtype: np.dtype | None = None) -> np.ufunc:
    """The ufunc for ``op``; with ``dtype``, also check that the op is defined for it."""
    if not isinstance(op, str) or op not in OPS:
        raise ValueError(f"unknown op {op!r}: expected one of {', '.join(OPS)}")
    if dtype is not None:
        dtype = check_dtype(dtype)
        if op in ("max", "min") and dtype.kind == "c":
            raise TypeError(f"op {op!r} is not defined for complex dtype {dtype}")
    return OPS[op]
