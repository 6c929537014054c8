"""The forms of a call users of torch.distributed, mpi4py and NCCL reach for, on the cpu
backend: op names in any case, ``ring.ReduceOp`` and NumPy ufuncs; n-D contiguous arrays;
out of place (``recv=``); ``async_op=True`` with a handle to wait on, a real Ctrl-C in the
wait included.  Each against the float64 / exact reference on random non-zero data, and
bad input refused before anything is touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ctrl_c import let_children_see_sigint
from reference import check, random_inputs

import ring
from ring.cpu import CpuCommunicator

let_children_see_sigint()

SPELLINGS = [
    ("SUM", "sum"),
    ("Max", "max"),
    (ring.ReduceOp.PROD, "prod"),
    (ring.ReduceOp.AVG, "avg"),
    (np.add, "sum"),
    (np.minimum, "min"),
    (np.multiply, "prod"),
]


@pytest.mark.parametrize("nodes", [1, 3])
@pytest.mark.parametrize("given, op", SPELLINGS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_spelling_of_an_op_is_that_op(given, op, nodes):
    rng = np.random.default_rng(nodes)
    inputs = random_inputs(rng, nodes, 13, np.float32, op)
    buffers = [x.copy() for x in inputs]
    ring.allreduce(buffers, given)
    for buf in buffers:
        check(buf, inputs, op)
    held = [x.copy() for x in inputs]
    with CpuCommunicator(nodes) as comm:
        comm.allreduce(held, given)
        comm.allreduce(held, op)  # the canonical name after another spelling: bound or not
    twice = [buf.copy() for buf in buffers]
    for buf in held:
        check(buf, twice, op)


@pytest.mark.parametrize("given", ["mean", np.subtract, 3, None])
def test_an_unknown_op_is_refused_naming_the_spellings(given):
    buffers = [np.ones(5), np.full(5, 2.0)]
    with pytest.raises(ValueError, match="unknown op") as raised:
        ring.allreduce(buffers, given)
    if given is not None:
        assert "any case" in str(raised.value) and "np.add" in str(raised.value)
    assert all((b == v).all() for b, v in zip(buffers, (1.0, 2.0), strict=True))


@pytest.mark.parametrize("shape", [(2, 7), (3, 1, 5), (1,), ()])
@pytest.mark.parametrize("nodes", [1, 3, 4])
def test_n_d_contiguous_arrays_reduce_as_their_elements(shape, nodes):
    rng = np.random.default_rng(len(shape) + nodes)
    count = int(np.prod(shape))
    inputs = [x.reshape(shape) for x in random_inputs(rng, nodes, count, np.float64, "sum")]
    flat = [x.reshape(-1) for x in inputs]
    buffers = [x.copy() for x in inputs]
    ring.allreduce(buffers, "sum")
    for buf in buffers:
        assert buf.shape == shape
        check(buf.reshape(-1), flat, "sum")
    # reduce_scatter and all_gather: what the flat buffers would hold.
    for name in ("reduce_scatter", "all_gather"):
        shaped, lined = [x.copy() for x in inputs], [x.copy() for x in flat]
        args = () if name == "all_gather" else ("sum",)
        getattr(ring, name)(shaped, *args)
        getattr(ring, name)(lined, *args)
        for a, b in zip(shaped, lined, strict=True):
            np.testing.assert_array_equal(a.reshape(-1), b)


def test_a_strided_n_d_array_is_refused_untouched():
    columns = np.ones((4, 6))[:, ::2]
    buffers = [np.ones((4, 3)), columns]
    with pytest.raises(ValueError, match=r"buffers\[1\] has shape \(4, 3\) and is not C-cont"):
        ring.allreduce(buffers)
    assert (buffers[0] == 1).all() and (columns == 1).all()


@pytest.mark.parametrize("name", ["allreduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("nodes", [1, 3, 5])
def test_out_of_place_leaves_send_and_matches_in_place(name, nodes):
    rng = np.random.default_rng(nodes)
    inputs = random_inputs(rng, nodes, 11, np.float64, "sum")
    send = [x.copy() for x in inputs]
    for buf in send:
        buf.flags.writeable = False  # send is only read
    recv = [np.full((11,), np.nan) for _ in range(nodes)]
    args = () if name == "all_gather" else ("sum",)
    getattr(ring, name)(send, *args, recv=recv)
    in_place = [x.copy() for x in inputs]
    getattr(ring, name)(in_place, *args)
    for s, x in zip(send, inputs, strict=True):
        np.testing.assert_array_equal(s, x)
    for r, x in zip(recv, in_place, strict=True):
        np.testing.assert_array_equal(r, x)


def test_out_of_place_takes_other_shapes_strides_and_nodes_in_place():
    rng = np.random.default_rng(5)
    inputs = random_inputs(rng, 3, 12, np.float32, "max")
    strided = np.zeros(24, np.float32)
    strided[::2] = inputs[1]
    recv = [np.zeros((3, 4), np.float32), np.zeros(12, np.float32), inputs[2].copy()]
    send = [inputs[0].reshape(4, 3), strided[::2], recv[2]]  # node 2 in place
    ring.allreduce(send, "max", recv=recv)
    for r in recv:
        check(r.reshape(-1), inputs, "max")


@pytest.mark.parametrize(
    "case, message",
    [
        ("other dtype", r"send\[1\] \(7 elements of float32\) does not match recv\[1\]"),
        ("other size", r"send\[1\] \(8 elements of float64\) does not match"),
        ("another node's recv", r"send\[0\] shares memory with recv\[1\]"),
        ("one short", "send has 1 buffers but recv has 2"),
        ("not a list", "send must be a list"),
        ("not an array", r"send\[1\] is not an array"),
        ("recv read-only", r"buffers\[0\] is read-only"),
        ("recv of other lengths", r"buffers\[1\] has 6 elements but buffers\[0\] has 7"),
        ("recv not a list", "buffers must be a list of arrays"),
    ],
)
def test_bad_out_of_place_arguments_touch_nothing(case, message):
    send = [np.full(7, 1.0), np.full(7, 2.0)]
    recv = [np.full(7, 5.0), np.full(7, 6.0)]
    if case == "other dtype":
        send[1] = np.ones(7, np.float32)
    elif case == "other size":
        send[1] = np.ones(8)
    elif case == "another node's recv":
        send[0] = recv[1]
    elif case == "one short":
        send = send[:1]
    elif case == "not a list":
        send = np.ones(7)
    elif case == "not an array":
        send[1] = [1.0] * 7
    elif case == "recv read-only":
        recv[0].flags.writeable = False
    elif case == "recv of other lengths":
        recv[1] = np.full(6, 6.0)
    before = [np.array(x, copy=True) for x in (*send, *recv)] if case != "not a list" else []
    with pytest.raises((TypeError, ValueError), match=message) as refused:
        ring.allreduce(send, recv=recv[0] if case == "recv not a list" else recv)
    after = [np.array(x, copy=True) for x in (*send, *recv)] if case != "not a list" else []
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert (recv[0] == 5.0).all() and (recv[1] == 6.0).all()
    # recv is checked as the call's buffers: a refusal of it says buffers[i] are recv's
    notes = getattr(refused.value, "__notes__", [])
    assert notes == (
        ["(recv was checked as the call's buffers: buffers[i] above is recv[i])"]
        if case.startswith("recv")
        else []
    )


def test_async_calls_run_in_order_and_a_later_call_waits_its_turn():
    rng = np.random.default_rng(9)
    inputs = random_inputs(rng, 3, 1 << 16, np.float64, "sum")
    buffers = [x.copy() for x in inputs]
    works = [ring.allreduce(buffers, ring.ReduceOp.SUM, async_op=True) for _ in range(3)]
    ring.allreduce(buffers, "avg")  # after the three, as the program says
    assert all(w.is_completed() for w in works)
    assert all(w.wait() is True and w.exception() is None for w in works)
    expected = np.sum(np.asarray(inputs, dtype=np.float64), axis=0) * 3**2
    for buf in buffers:
        np.testing.assert_allclose(buf, expected, rtol=1e-12)
    recv = [np.empty(1 << 16) for _ in range(3)]
    work = ring.allreduce(inputs, "max", recv=recv, async_op=True)
    assert work.wait(timeout=60)
    for r in recv:
        check(r, inputs, "max")


def test_async_bad_input_raises_in_the_caller_and_queues_nothing():
    buffers = [np.ones(4), np.ones(5)]
    with pytest.raises(ValueError, match="elements"):
        ring.allreduce(buffers, async_op=True)
    with pytest.raises(TypeError, match="async_op must be True or False"):
        ring.allreduce([np.ones(4), np.ones(4)], async_op="yes")
    assert not ring.work.PENDING.get("cpu")


def test_a_failure_in_an_async_call_raises_from_wait(monkeypatch):
    def fail(self, *args, **kwargs):
        raise RuntimeError("the call failed")

    monkeypatch.setattr(CpuCommunicator, "keyed_call", fail)
    work = ring.allreduce([np.ones(4), np.ones(4)], async_op=True)
    with pytest.raises(RuntimeError, match="the call failed"):
        work.wait(timeout=60)
    assert isinstance(work.exception(), RuntimeError)


_CTRL_C = textwrap.dedent(
    """
    import sys, numpy as np, ring
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(0.5, 2.0, 1 << 22) for _ in range(4)]
    buffers = [x.copy() for x in inputs]
    works = [ring.allreduce(buffers, async_op=True) for _ in range(8)]
    try:
        print("waiting", flush=True)
        for w in works:
            w.wait()
        print("done before the signal", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    for w in works:
        w.wait()  # the calls themselves went on: each completes
    expected = np.sum(inputs, axis=0) * 4**7
    right = all(np.allclose(b, expected, rtol=1e-9) for b in buffers)
    again = [x.copy() for x in inputs]
    ring.allreduce(again)
    right = right and all(np.allclose(b, np.sum(inputs, axis=0), rtol=1e-12) for b in again)
    print("right" if right else "WRONG", flush=True)
    """
)


def test_a_ctrl_c_in_wait_interrupts_the_wait_not_the_calls():
    process = subprocess.Popen(
        [sys.executable, "-c", _CTRL_C],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RING_WISDOM": "off"},
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "waiting"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    lines = out.split()
    assert lines[-1] == "right", out + err
    assert lines[0] in ("interrupted", "done")
