"""MPI's bitwise ops (``band``, ``bor``, ``bxor``) on integer and bool dtypes, and bool
with ``max``/``min`` (any/all), on every algorithm and executor of the cpu backend,
against exact Python references; what a dtype does not allow is refused, untouched."""

from __future__ import annotations

import numpy as np
import pytest
from reference import BITWISE, check, ops_for, random_inputs

import ring
from ring.cpu import CpuCommunicator
from ring.schedule import ALGORITHMS

DTYPES = [np.int8, np.uint16, np.int32, np.uint64, np.bool_]


def _options(algorithm: str, nodes: int) -> dict:
    if algorithm == "hierarchical":
        return {"group_size": next(g for g in (2, 1) if nodes % g == 0)}
    return {}


@pytest.mark.parametrize("executor, inline", [("nodes", 0), ("slices", 0), ("nodes", 1 << 20)])
@pytest.mark.parametrize("nodes", [1, 2, 3, 5])
@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "reduce-broadcast"])
def test_bitwise_and_bool_ops_match_the_reference(algorithm, nodes, executor, inline):
    rng = np.random.default_rng(nodes)
    options = {"executor": executor, "inline_bytes": inline, **_options(algorithm, nodes)}
    with CpuCommunicator(nodes, algorithm=algorithm, **options) as comm:
        for dtype in DTYPES:
            ops = ops_for(dtype) if np.dtype(dtype).kind == "b" else BITWISE
            for count in (0, 1, nodes - 1, 2 * nodes + 1, 97):
                for op in ops:
                    inputs = random_inputs(rng, nodes, count, dtype, "sum")
                    buffers = [x.copy() for x in inputs]
                    comm.allreduce(buffers, op)
                    for buf in buffers:
                        check(buf, inputs, op)


def test_reduce_broadcast_and_the_module_function_take_them():
    rng = np.random.default_rng(2)
    for nodes in (2, 3):
        inputs = random_inputs(rng, nodes, 33, np.uint8, "sum")
        for spelling, op in (
            ("BXOR", "bxor"),
            (np.bitwise_and, "band"),
            (ring.ReduceOp.BOR, "bor"),
        ):
            buffers = [x.copy() for x in inputs]
            ring.allreduce(buffers, spelling, algorithm="reduce-broadcast")
            for buf in buffers:
                check(buf, inputs, op)


@pytest.mark.parametrize(
    "dtype, op, message",
    [
        (np.float32, "band", "bitwise: for integer and bool dtypes, not float32"),
        (np.complex64, "bxor", "bitwise"),
        (np.bool_, "sum", "not defined for bool: use bor or max"),
        (np.bool_, "prod", "not defined for bool"),
        (np.bool_, "avg", "not defined for bool"),
    ],
)
def test_an_op_the_dtype_lacks_is_refused_untouched(dtype, op, message):
    buffers = [np.ones(5, dtype), np.zeros(5, dtype)]
    before = [b.copy() for b in buffers]
    with pytest.raises(TypeError, match=message):
        ring.allreduce(buffers, op)
    assert all(np.array_equal(a, b) for a, b in zip(buffers, before, strict=True))


def test_the_harness_sweeps_nccls_ops_only(tmp_path, capsys):
    from ring.bench.__main__ import main

    out = tmp_path / "x.csv"
    args = ["-b", "64", "-e", "64", "-n", "1", "-d", "int32", "-o", "band", "--out", str(out)]
    assert main([*args, "--backend", "numpy-direct"]) == 2
    assert "the harness sweeps sum, prod, max, min, avg" in capsys.readouterr().err
    assert not out.exists()
