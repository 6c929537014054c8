"""What the MPI backends (``mpi``, ``mpi-allreduce``) share: :class:`MpiBackend`, and
where their buffers live (``--buffers``, a comma list measured as one series each, CSV
column ``buffers`` when given):

- ``host`` (the default): NumPy arrays of each rank's own;
- ``shared``: NumPy arrays in memory every rank on the host maps
  (:meth:`ring.mpi.MpiRing.shared_buffer`; ``mpi-allreduce`` gets the same memory, which
  MPI_Allreduce treats as any other);
- ``device``, like ``osu_allreduce -d cuda``: each rank's working buffers live on a GPU
  (CuPy) and MPI reads and writes device memory directly, which needs a CUDA-aware MPI
  library (:func:`ring.mpi.cuda.cuda_aware`).

The inputs are still drawn on the host, copied to the device when a size is loaded and
restored on the device before each call (outside the timed region: the copy is waited for
before the barrier that starts the call), and copied back to the host for validation.
Rank r uses device ``local rank mod device count``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..._optional import require
from ...mpi.cuda import device_backend
from ...mpi.shared import shared_directory
from ..cli import BenchInputError
from ..flags import split_list
from ..nccl_compat import RANK_MEAN_COLUMNS
from .base import Backend, DeviceSession, MpiSession, Session

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = [
    "BUFFERS",
    "DeviceBuffers",
    "MpiBackend",
    "SharedBuffers",
    "add_buffers_argument",
    "buffers_requested",
    "check_buffers",
    "device_session",
]

BUFFERS = ("host", "device", "shared")


def add_buffers_argument(parser) -> None:
    """The ``--buffers`` flag, once, whichever MPI backends add it."""
    if "--buffers" not in parser._option_string_actions:
        parser.add_argument(
            "--buffers",
            default="",
            help="where an MPI backend's buffers live: host (default), shared (memory every "
            "rank on the host maps: ring.mpi.MpiRing.shared_buffer) or device (a GPU per "
            "rank; needs CuPy and a CUDA-aware MPI); a comma list (host,shared) measures "
            "each in turn (CSV column buffers)",
        )


def buffers_requested(config) -> tuple[str, ...]:
    """``--buffers``: where the buffers live, each kind its own series."""
    return split_list(config.options.get("buffers") or "host", "--buffers")


def check_buffers(config, backend: str) -> None:
    """Refuse an unknown ``--buffers`` value, device buffers this machine cannot use, or
    shared buffers whose directory (``RING_SHM_DIR``) is not one."""
    for buffers in buffers_requested(config):
        if buffers not in BUFFERS:
            expected = ", ".join(BUFFERS)
            raise BenchInputError(f"--buffers {buffers!r}: expected one of {expected}")
    if "device" in buffers_requested(config):
        try:
            device_backend()
        except RuntimeError as exc:
            raise BenchInputError(f"backend {backend} --buffers device: {exc}") from None
    if "shared" in buffers_requested(config):
        try:
            shared_directory()
        except ValueError as exc:
            raise BenchInputError(f"backend {backend} --buffers shared: {exc}") from None


class DeviceBuffers(DeviceSession, MpiSession):
    """Put before a host MPI session's class: the same collective on CuPy buffers."""

    buffers_kind = "device"

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


class SharedBuffers(MpiSession):
    """Put before a host MPI session's class: its buffers in memory every rank on the host
    maps (the session's ``shared_array``), restored like host buffers."""

    buffers_kind = "shared"

    def empty_like(self, values: np.ndarray) -> np.ndarray:
        return self.shared_array(len(values), values.dtype)


def device_session(session_class: type, config, buffers: str | None = None) -> type:
    """``session_class``, or its form for ``buffers`` (default: the first ``--buffers``)
    when they are not host buffers."""
    kind = buffers or buffers_requested(config)[0]
    if kind == "host":
        return session_class
    mixin = DeviceBuffers if kind == "device" else SharedBuffers
    name = f"{kind.capitalize()}{session_class.__name__}"
    return type(name, (mixin, session_class), {})


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

    def variants(self, config: BenchConfig, algorithm: str = "") -> tuple[dict[str, Any], ...]:
        if not config.options.get("buffers"):
            return ({},)  # the default names no series
        return tuple({"buffers": kind} for kind in buffers_requested(config))

    def session(self, config: BenchConfig) -> type:
        """The session class for this series' buffers."""
        return device_session(self.session_class, config, self.variant.get("buffers"))

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return self.session(config)(nodes, sync, config, world)
