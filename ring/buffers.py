"""Checks every backend runs on its buffers before any data moves."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from .ops import check_dtype

__all__ = ["validate_buffers"]


def validate_buffers(
    buffers: Sequence, *, array_type: type[Any] = np.ndarray, kind: str = "NumPy"
) -> tuple[int, np.dtype]:
    """Return ``(count, dtype)`` of a list of per-node buffers, or raise.

    Every buffer must be a one-dimensional, C-contiguous, writeable ``array_type`` of the
    same length and dtype, and no two may share memory (each node owns its buffer).
    """
    if isinstance(buffers, (str, bytes)) or not isinstance(buffers, Sequence):
        raise TypeError(
            f"buffers must be a list of {kind} arrays, one per node, got {type(buffers).__name__}"
        )
    if len(buffers) == 0:
        raise ValueError("buffers is empty: pass one array per node")
    first: Any = buffers[0]
    for i, buf in enumerate(buffers):
        if not isinstance(buf, array_type):
            raise TypeError(
                f"buffers[{i}] must be a {kind} array ({array_type.__module__}."
                f"{array_type.__name__}), got {type(buf).__name__}"
            )
        if buf.ndim != 1:
            raise ValueError(f"buffers[{i}] must be one-dimensional, got shape {buf.shape}")
        if not buf.flags.c_contiguous:
            raise ValueError(f"buffers[{i}] is not contiguous: pass a contiguous array")
        if not getattr(buf.flags, "writeable", True):
            raise ValueError(f"buffers[{i}] is read-only: the collective writes in place")
        if buf.dtype != first.dtype:
            raise TypeError(
                f"buffers[{i}] has dtype {buf.dtype} but buffers[0] has {first.dtype}: "
                "all nodes must use one dtype"
            )
        if buf.shape[0] != first.shape[0]:
            raise ValueError(
                f"buffers[{i}] has {buf.shape[0]} elements but buffers[0] has "
                f"{first.shape[0]}: all nodes must hold the same number of elements"
            )
    check_dtype(first.dtype)
    _check_disjoint(buffers)
    return first.shape[0], first.dtype


def _check_disjoint(buffers: Sequence) -> None:
    if len(buffers) < 2 or buffers[0].nbytes == 0:
        return
    if len(buffers) <= 16:
        # may_share_memory is a cheap bounds check (0.2 us); fine for few pairs.
        pairs = (
            (a, b)
            for a in range(len(buffers))
            for b in range(a + 1, len(buffers))
            if _may_share(buffers[a], buffers[b])
        )
    else:
        # Sort by start address so only neighbours need comparing.
        spans = sorted((_address(buf), i) for i, buf in enumerate(buffers))
        nbytes = buffers[0].nbytes
        pairs = (
            (min(a, b), max(a, b))
            for (start_a, a), (start_b, b) in itertools.pairwise(spans)
            if start_a + nbytes > start_b
        )
    for a, b in pairs:
        raise ValueError(
            f"buffers[{a}] and buffers[{b}] share memory: each node needs its own buffer"
        )


def _address(buf) -> int:
    data = buf.data
    return data.ptr if hasattr(data, "ptr") else buf.ctypes.data


def _may_share(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return np.may_share_memory(a, b)
    start_a, start_b = _address(a), _address(b)
    return start_a < start_b + b.nbytes and start_b < start_a + a.nbytes
