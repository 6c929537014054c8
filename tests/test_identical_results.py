"""Every node ends a collective with the same bits, and every executor with the same bits
as every other: the plans fix the order of each reduction's operands
(``ring.schedule.steps.Move.source_first``), which matters where an op is not bitwise
commutative (NumPy's complex multiply: ``a * b != b * a`` in a third of elements).

Random non-zero data, N = 2..8, every algorithm, op and a float, complex and integer
dtype, on the cpu backend by nodes and by position, on the workers and inline (where the
bound path runs the repeated call); the MPI ranks in ``mpi_programs/identical.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference import check, ops_for, random_inputs
from test_mpi import json_lines, mpirun
from test_mpi import pytestmark as mpi_marks

import ring
from ring.schedule import ALGORITHMS

DTYPES = [np.complex128, np.complex64, np.float32, np.int64]
# (executor, inline_bytes): on the workers and on the calling thread.
EXECUTORS = [("nodes", 0), ("nodes", 1 << 30), ("slices", 0), ("slices", 1 << 30)]
LENGTH = 263  # a prime: chunks of unequal length at every N


def _algorithms(nodes: int):
    for algorithm in ALGORITHMS:
        if algorithm == "hierarchical":
            for size in (s for s in range(2, nodes) if nodes % s == 0):
                yield algorithm, {"group_size": size}
        else:
            yield algorithm, {}


def _run(inputs, op, algorithm, options, executor, inline):
    buffers = [x.copy() for x in inputs]
    for _ in range(2):  # the second call on the same buffers is the bound one, inline
        for b, x in zip(buffers, inputs, strict=True):
            b[...] = x
        ring.allreduce(
            buffers, op, algorithm=algorithm, executor=executor, inline_bytes=inline, **options
        )
    return buffers


def _bits(array) -> bytes:
    return np.ascontiguousarray(array).view(np.uint8).tobytes()


@pytest.mark.parametrize("nodes", range(2, 9))
def test_every_node_and_executor_ends_with_the_same_bits(nodes):
    rng = np.random.default_rng(nodes)
    different = []
    for algorithm, options in _algorithms(nodes):
        for dtype in DTYPES:
            for op in ops_for(dtype):
                inputs = random_inputs(rng, nodes, LENGTH, dtype, op)
                first = None
                for executor, inline in EXECUTORS:
                    result = _run(inputs, op, algorithm, options, executor, inline)
                    check(result[0], inputs, op)
                    label = (algorithm, options, np.dtype(dtype).name, op, executor, inline)
                    if any(_bits(b) != _bits(result[0]) for b in result[1:]):
                        different.append(("nodes differ", *label))
                    first = _bits(result[0]) if first is None else first
                    if _bits(result[0]) != first:
                        different.append(("executors differ", *label))
    assert different == []


@pytest.mark.parametrize("nodes", [3, 4])
def test_complex_prod_by_recursive_doubling_is_the_same_on_every_node(nodes):
    """The case that found the defect: complex products exchanged by recursive doubling."""
    rng = np.random.default_rng(7)
    inputs = random_inputs(rng, nodes, 4096, np.complex128, "prod")
    result = _run(inputs, "prod", "recursive-doubling", {}, "nodes", 0)
    for b in result[1:]:
        np.testing.assert_array_equal(b, result[0])


@pytest.mark.slow
@pytest.mark.timeout(330)
@pytest.mark.parametrize("nodes", [3, 4])
def test_every_mpi_rank_ends_with_the_same_bits(nodes):
    for mark in mpi_marks:
        if mark.name == "skipif" and mark.args[0]:
            pytest.skip(mark.kwargs["reason"])
    code, out, err, _ = mpirun(nodes, "identical.py", timeout=300)
    (result,) = json_lines(out)
    assert result["nodes"] == nodes, err
    assert result["cases"] > 100
    assert result["different"] == [], "\n".join(map(str, result["different"]))
    assert code == 0, err
