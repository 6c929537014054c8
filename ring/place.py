"""Out-of-place calls: ``ring.allreduce(send, op, recv=recv)`` leaves ``send`` as it was and
writes the result to ``recv`` (NCCL's ``sendbuff``/``recvbuff``, MPI's ``Allreduce(sendbuf,
recvbuf)``).

It is the in-place call on ``recv`` after each ``send[i]`` is copied into ``recv[i]``
(:func:`ring.communicator.copy_in`): one more pass over the data than a fused out-of-place
kernel, the price of running the one in-place schedule (the harness's out-of-place columns
time the same thing).  ``send[i]``
may be read-only, strided or of another shape, with ``recv[i]``'s dtype and number of
elements; it may be ``recv[i]`` itself or overlap it (that node in place), but no other
``recv[j]``, or copying one node's input would overwrite another's.  These checks come
after the call's own checks of ``recv`` and before anything is copied.
"""

from __future__ import annotations

from collections.abc import Sequence

from .communicator import may_share

__all__ = ["Refused", "check_send"]


class Refused(Sequence):
    """A buffer list that raises ``error`` when a call reads it.  Under MPI a rank whose
    ``send`` was refused still joins the call with it: the call's pre-flight exchange then
    makes every rank raise the one error, instead of leaving the others waiting."""

    def __init__(self, error: Exception):
        self.error = error

    def __len__(self) -> int:
        raise self.error

    def __getitem__(self, index):
        raise self.error


def check_send(send: object, recv: list) -> list:
    """``send`` as a list matching ``recv`` (already checked as the call's buffers), or one
    line saying what is wrong."""
    if not isinstance(send, Sequence) or isinstance(send, (str, bytes)):
        raise TypeError(f"send must be a list of arrays, one per node, got {type(send).__name__}")
    send = list(send)
    if len(send) != len(recv):
        raise ValueError(f"send has {len(send)} buffers but recv has {len(recv)}")
    for i, (mine, out) in enumerate(zip(send, recv, strict=True)):
        dtype, size = getattr(mine, "dtype", None), getattr(mine, "size", None)
        if dtype is None or size is None or not hasattr(mine, "reshape"):
            raise TypeError(f"send[{i}] is not an array: got {type(mine).__name__}")
        if dtype != out.dtype or size != out.size:
            raise ValueError(
                f"send[{i}] ({size} elements of {dtype}) does not match recv[{i}] "
                f"({out.size} of {out.dtype})"
            )
        for j, other in enumerate(recv):
            if j != i and may_share(mine, other):
                raise ValueError(
                    f"send[{i}] shares memory with recv[{j}]: pass the same array for a "
                    "node in place, or buffers apart"
                )
    return send
