"""Reduction operators and the dtypes they accept.

``avg`` is NCCL's ``ncclAvg``: the sum divided by the number of nodes N.  Every backend
accumulates it as ``sum`` and divides once, where it costs least: each node divides the
range it completes (its owned chunk, at the end of reduce-scatter), so all-gather copies
the averages exactly.  Floating and complex dtypes divide exactly as NumPy's ``x / N``.
Integers divide as C and NCCL do: the sum, wrapped to the dtype as ``sum`` wraps it, is
divided by N and the quotient truncated toward zero (``-7`` averaged over 2 nodes is
``-3``), so the average of integers is an integer of the same dtype.

``band``, ``bor`` and ``bxor`` are MPI's bitwise ops, for integer and bool dtypes; on bool
``max`` and ``min`` are any and all, and the arithmetic ops are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ACCUMULATE",
    "ARITHMETIC",
    "AVERAGING",
    "BITWISE",
    "COPY",
    "OPS",
    "SOURCE_FIRST",
    "ReduceOp",
    "accumulating_op",
    "apply",
    "check_dtype",
    "divide_by_nodes",
    "kind",
    "op_name",
    "resolve_op",
]

# Each op is the NumPy ufunc a backend applies with ``out=`` when a chunk arrives.
OPS: dict[str, np.ufunc] = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "avg": np.add,
    "band": np.bitwise_and,
    "bor": np.bitwise_or,
    "bxor": np.bitwise_xor,
}
# NCCL's ops (ncclSum ... ncclAvg): what the harness and the study sweep against the peers.
ARITHMETIC = ("sum", "prod", "max", "min", "avg")
# MPI's MPI_BAND, MPI_BOR, MPI_BXOR: for integer and bool dtypes.
BITWISE = frozenset({"band", "bor", "bxor"})


class ReduceOp:
    """The op names as constants (``torch.distributed.ReduceOp``'s, NCCL's ``ncclSum``...):
    ``ring.allreduce(buffers, ring.ReduceOp.SUM)``."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    AVG = "avg"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


# The NumPy ufuncs a caller may name an op by (mpi4py and NumPy habits): ``np.add`` is sum.
_UFUNC_OPS = {np.add: "sum", np.multiply: "prod", np.maximum: "max", np.minimum: "min"}
_UFUNC_OPS |= {np.bitwise_and: "band", np.bitwise_or: "bor", np.bitwise_xor: "bxor"}


def op_name(op: object) -> str:
    """The op's name as :data:`OPS` spells it: a name in any case (``"SUM"``), a
    :class:`ReduceOp` constant, or its ufunc (``np.add``, ``np.multiply``, ``np.maximum``,
    ``np.minimum``, ``np.bitwise_and``, ``np.bitwise_or``, ``np.bitwise_xor``)."""
    if isinstance(op, str) and op.lower() in OPS:
        return op.lower()
    if isinstance(op, np.ufunc) and op in _UFUNC_OPS:
        return _UFUNC_OPS[op]
    raise ValueError(
        f"unknown op {op!r}: expected one of {', '.join(OPS)} (any case, or ring.ReduceOp.SUM"
        " ...), or the ufunc (np.add, np.maximum, np.bitwise_and ...)"
    )


# The ops that end by dividing each completed range by the number of nodes.
AVERAGING = frozenset({"avg"})

# Integer (signed and unsigned), floating, complex and bool dtypes.
SUPPORTED_KINDS = "iufcb"


def check_dtype(dtype: np.dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind not in SUPPORTED_KINDS:
        raise TypeError(
            f"dtype {dtype} is not supported: use a bool, integer, floating or complex dtype"
        )
    return dtype


def resolve_op(op: object, dtype: np.dtype | None = None) -> np.ufunc:
    """The ufunc for ``op``; with ``dtype``, also check that the op is defined for it."""
    if not isinstance(op, str) or op not in OPS:
        op = op_name(op)  # another spelling of one (ring.communicator.normalized_op), or refused
    if dtype is not None:
        dtype = check_dtype(dtype)
        if op in ("max", "min") and dtype.kind == "c":
            raise TypeError(f"op {op!r} is not defined for complex dtype {dtype}")
        if op in BITWISE and dtype.kind not in "iub":
            raise TypeError(f"op {op!r} is bitwise: for integer and bool dtypes, not {dtype}")
        if dtype.kind == "b" and op not in BITWISE and op not in ("max", "min"):
            raise TypeError(
                f"op {op!r} is not defined for bool: use bor or max (any), band or min (all), "
                "or bxor (odd count)"
            )
    return OPS[op]


def accumulating_op(op: str) -> str:
    """The op that accumulates arriving ranges for ``op`` (``avg`` accumulates as ``sum``)."""
    return "sum" if op in AVERAGING else op


def divide_by_nodes(values: Any, nodes: int, xp: Any = np, scratch: Any = None) -> None:
    """``values /= nodes`` in place, as ``avg`` defines it for the dtype (see above).

    ``xp`` is NumPy or CuPy (whose ufuncs queue on the current stream); integer division
    needs a temporary as long as ``values``: ``scratch`` if given (so a GPU call allocates
    nothing), else a new array.
    """
    dtype = np.dtype(values.dtype)
    if dtype.kind not in "iu":
        xp.divide(values, nodes, out=values)
        return
    if nodes > np.iinfo(dtype).max:  # N does not fit the dtype (int8 beyond 127 nodes)
        wide = values.astype(np.int64)
        divide_by_nodes(wide, nodes, xp)
        values[...] = wide
        return
    remainder = xp.empty_like(values) if scratch is None else scratch[: values.shape[0]]
    # x - fmod(x, N) is a multiple of N of x's sign, so floor division of it is exact: the
    # quotient truncated toward zero, with no intermediate that could overflow.
    xp.fmod(values, nodes, out=remainder)
    xp.subtract(values, remainder, out=values)
    xp.floor_divide(values, nodes, out=values)


# What an operation does with its source (the first field of an operation tuple).
COPY, ACCUMULATE, SOURCE_FIRST = 0, 1, 2


def kind(accumulate: bool, source_first: bool) -> int:
    """An operation's :data:`COPY`, :data:`ACCUMULATE` (``dst = dst op src``) or
    :data:`SOURCE_FIRST` (``dst = src op dst``, see ``ring.schedule.steps.Move``)."""
    if not accumulate:
        return COPY
    return SOURCE_FIRST if source_first else ACCUMULATE


def apply(operations, ufunc, nodes: int) -> None:
    """Run ``(kind, destination, source, divide by N after)`` operations in order: what every
    host executor (:mod:`ring.host`) does to the arrays, by node step or by position."""
    for how, dst, src, divide in operations:
        if how == ACCUMULATE:
            ufunc(dst, src, out=dst)
        elif how:
            ufunc(src, dst, out=dst)
        else:
            dst[...] = src
            continue
        if divide:
            divide_by_nodes(dst, nodes)
