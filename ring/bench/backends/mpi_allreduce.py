"""Backend ``mpi-allreduce``: what an MPI user calls, ``MPI_Allreduce`` in place (and, for
the table's out-of-place group, out of place: from the inputs into the working buffers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...ops import AVERAGING, divide_by_nodes
from ..cli import BenchInputError
from .base import MpiSession, register_backend
from .mpi_device import MpiBackend

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = ["MpiAllreduceBackend", "MpiAllreduceSession", "mpi_datatype"]


def _mpi_op(MPI, op: str):
    # MPI has no average: avg is MPI_SUM, divided afterwards (MpiAllreduceSession).
    return {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN, "avg": MPI.SUM}[op]


class MpiAllreduceSession(MpiSession):
    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        super().__init__(nodes, sync, config, world)
        MPI = world.MPI
        self._op = _mpi_op(MPI, config.op)
        self._datatype = mpi_datatype(MPI, config.dtype)
        self._in_place = MPI.IN_PLACE
        self._average = config.op in AVERAGING

    def collective(self) -> None:
        for buffer in self.buffers:
            self.world.comm.Allreduce(self._in_place, [buffer, self._datatype], op=self._op)
            if self._average:
                divide_by_nodes(buffer, self.world.comm.Get_size())

    # MPI reduces out of place itself: no copy, the send buffers are the pristine inputs.
    out_of_place = "MPI's own MPI_Allreduce(send, recv)"

    def collective_out_of_place(self) -> None:
        datatype = self._datatype
        for send, buffer in zip(self._inputs, self.buffers, strict=True):
            self.world.comm.Allreduce([send, datatype], [buffer, datatype], op=self._op)
            if self._average:
                divide_by_nodes(buffer, self.world.comm.Get_size())


def mpi_datatype(MPI, dtype: np.dtype):
    """The predefined MPI datatype of ``dtype``, or None if this MPI library has none."""
    fromcode = getattr(MPI.Datatype, "fromcode", None)  # mpi4py >= 4
    try:
        datatype = fromcode(dtype.char) if fromcode else MPI._typedict[dtype.char]
    except (KeyError, ValueError, MPI.Exception):
        return None
    return None if datatype == MPI.DATATYPE_NULL else datatype


def _reduces(world, datatype, config: BenchConfig) -> bool:
    """Whether MPI_Allreduce takes ``datatype`` with ``config.op``: having a datatype is not
    enough (Open MPI 4.1 maps float16 to one and then fails with MPI_ERR_TYPE).  A one-element
    call on a duplicate that returns errors instead of aborting; every rank runs it."""
    MPI = world.MPI
    probe = world.comm.Dup()
    try:
        probe.Set_errhandler(MPI.ERRORS_RETURN)
        values = np.ones(1, dtype=config.dtype)
        probe.Allreduce(MPI.IN_PLACE, [values, datatype], op=_mpi_op(MPI, config.op))
    except MPI.Exception:
        return False
    finally:
        probe.Free()
    return True


@register_backend
class MpiAllreduceBackend(MpiBackend):
    name = "mpi-allreduce"
    description = "MPI_Allreduce (in place) through mpi4py, one rank per node, under mpirun"
    traffic = None  # the MPI library's algorithm and its shared-memory copies are hidden
    session_class = MpiAllreduceSession

    def check(self, config: BenchConfig, world) -> None:
        MPI = world.MPI
        datatype = mpi_datatype(MPI, config.dtype)
        if datatype is None or not _reduces(world, datatype, config):
            raise BenchInputError(
                f"backend mpi-allreduce: this MPI library cannot reduce {config.dtype.name} "
                f"with {config.op!r}; use another -d/--dtype or -o/--op"
            )
        super().check(config, world)
