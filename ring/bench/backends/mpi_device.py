"""What the MPI backends (``mpi``, ``mpi-allreduce``) share: :class:`MpiBackend`, and
``--buffers device``, like ``osu_allreduce -d cuda``: each rank's
working buffers live on a GPU (CuPy) and MPI reads and writes device memory directly,
which needs a CUDA-aware MPI library (:func:`ring.mpi_cuda.cuda_aware`).

The inputs are still drawn on the host, copied to the device when a size is loaded and
restored on the device before each call (outside the timed region: the copy is waited for
before the barrier that starts the call), and copied back to the host for validation.
Rank r uses device ``local rank mod device count``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..._optional import require
from ...mpi_cuda import device_backend
from ..cli import BenchInputError
from ..nccl_compat import RANK_MEAN_COLUMNS
from .base import Backend, DeviceSession, MpiSession, Session

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = [
    "BUFFERS",
    "DeviceBuffers",
    "MpiBackend",
    "add_buffers_argument",
    "check_buffers",
    "device_session",
]

BUFFERS = ("host", "device")


def add_buffers_argument(parser) -> None:
    """The ``--buffers`` flag, once, whichever MPI backends add it."""
    if "--buffers" not in parser._option_string_actions:
        parser.add_argument(
            "--buffers",
            default="host",
            help="where an MPI backend's buffers live: host (default) or device (a GPU per "
            "rank; needs CuPy and a CUDA-aware MPI)",
        )


def _buffers(config) -> str:
    return config.options.get("buffers", "host")


def check_buffers(config, backend: str) -> None:
    """Refuse an unknown ``--buffers`` value, or device buffers this machine cannot use."""
    buffers = _buffers(config)
    if buffers not in BUFFERS:
        raise BenchInputError(f"--buffers {buffers!r}: expected one of {', '.join(BUFFERS)}")
    if buffers == "device":
        try:
            device_backend()
        except RuntimeError as exc:
            raise BenchInputError(f"backend {backend} --buffers device: {exc}") from None


class DeviceBuffers(DeviceSession, MpiSession):
    """Put before a host MPI session's class: the same collective on CuPy buffers."""

    def __init__(self, nodes: int, sync: str, config, world, **options):
        super().__init__(nodes, sync, config, world, **options)
        self.cupy = require("cupy", "--buffers device")
        count = self.cupy.cuda.runtime.getDeviceCount()
        self.device = self.cupy.cuda.Device(world.local_rank % count)
        self.device.use()
        self.shared_devices = world.local_size > count

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        self.buffers = []
        self._inputs = [self.cupy.asarray(values) for values in inputs]
        self.buffers = [self.cupy.empty_like(values) for values in self._inputs]
        self._times: list[float] = []

    def restore(self) -> None:
        for buffer, values in zip(self.buffers, self._inputs, strict=True):
            self.cupy.copyto(buffer, values)
        self.cupy.cuda.get_current_stream().synchronize()

    def results(self) -> list[np.ndarray]:
        return [self.cupy.asnumpy(buffer) for buffer in self.buffers]


def device_session(session_class: type, config) -> type:
    """``session_class``, or its device-buffer form under ``--buffers device``."""
    if _buffers(config) != "device":
        return session_class
    return type(f"Device{session_class.__name__}", (DeviceBuffers, session_class), {})


class MpiBackend(Backend):
    """A backend whose nodes are MPI ranks: launched by ``mpirun``, OSU's per-rank columns,
    ``--buffers host|device``; a subclass names its host session class."""

    needs_mpirun = True
    extra_columns = RANK_MEAN_COLUMNS
    session_class: ClassVar[type[MpiSession]]

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_buffers_argument(parser)

    def check(self, config: BenchConfig, world) -> None:
        check_buffers(config, self.name)

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return device_session(self.session_class, config)(nodes, sync, config, world)
