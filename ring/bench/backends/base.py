"""The backend interface (see the package's docstring for the contract): the registry
filled from entry points and ``RING_BENCH_PLUGINS``, :class:`Backend`, and the sessions a
backend builds on (:class:`HostSession`, :class:`MpiSession`, :class:`DeviceSession`)."""

from __future__ import annotations

import importlib
import os
import time
import warnings
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...ops import resolve_op
from ..cli import BenchInputError
from ..nccl_compat import aggregate_ranks, rank_mean_stats
from ..placement import rank_is_bound, threads_per_core
from ..schema import VARIANT_COLUMNS

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_MODULES",
    "VARIANT_COLUMNS",
    "Backend",
    "DeviceSession",
    "HostSession",
    "MpiSession",
    "Session",
    "available_backends",
    "get_backend",
    "register_backend",
    "unregister_backend",
]

ENTRY_POINT_GROUP = "ring.bench.backends"
DISTRIBUTION = "ring-allreduce-study"
# This package's own backend modules, imported directly when its installed metadata declares
# no entry points (a checkout on PYTHONPATH, or an editable install older than them).
PLUGIN_MODULES: tuple[str, ...] = (
    "ring.bench.backends.mpi_ring",
    "ring.bench.backends.gpu",
    "ring.bench.backends.nccl",
    "ring.bench.seed_cpp",
)

PLUGINS_ENV = "RING_BENCH_PLUGINS"

_REGISTRY: dict[str, type[Backend]] = {}
_plugins_loaded = False
_overriding = False


def register_backend(cls: type[Backend] | None = None, *, replace: bool = False):
    """Class decorator adding a :class:`Backend` subclass to the registry under its ``name``."""

    def add(backend: type[Backend]) -> type[Backend]:
        name = getattr(backend, "name", None)
        if not isinstance(name, str) or not name or "," in name:
            raise ValueError(f"{backend.__name__}.name must be a non-empty name without commas")
        if name in _REGISTRY and not (replace or _overriding) and _REGISTRY[name] is not backend:
            raise ValueError(f"a backend named {name!r} is already registered")
        _REGISTRY[name] = backend
        return backend

    return add if cls is None else add(cls)


def unregister_backend(name: str) -> None:
    _REGISTRY.pop(name, None)


def _load_entry_point(entry) -> None:
    def skip(why: str) -> None:
        warnings.warn(f"backend plugin {entry.name} = {entry.value} {why}", stacklevel=3)

    try:
        backend = entry.load()
    except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the others
        return skip(f"failed to load: {exc}")
    if not (isinstance(backend, type) and issubclass(backend, Backend)):
        return skip("is not a Backend subclass")
    if getattr(backend, "name", None) != entry.name:
        return skip(
            f"names itself {getattr(backend, 'name', None)!r}; "
            "the entry point must carry the backend's name"
        )
    register_backend(backend)


def _is_ours(dist) -> bool:
    return dist is not None and dist.name.lower().replace("_", "-") == DISTRIBUTION


def _load_plugins() -> None:
    global _overriding
    entries = metadata.entry_points(group=ENTRY_POINT_GROUP)
    if not any(_is_ours(entry.dist) for entry in entries):
        for module in PLUGIN_MODULES:
            importlib.import_module(module)
    for entry in entries:
        _load_entry_point(entry)
    extra = os.environ.get(PLUGINS_ENV, "")
    _overriding = True
    try:
        for module in filter(None, map(str.strip, extra.split(","))):
            importlib.import_module(module)
    finally:
        _overriding = False


def available_backends() -> dict[str, type[Backend]]:
    """Every registered backend by name, after loading the installed entry points of
    :data:`ENTRY_POINT_GROUP` and the modules named in ``RING_BENCH_PLUGINS``."""
    global _plugins_loaded
    if not _plugins_loaded:
        _load_plugins()
        _plugins_loaded = True
    return dict(_REGISTRY)


def get_backend(name: str) -> Backend:
    backends = available_backends()
    if name not in backends:
        raise BenchInputError(f"unknown backend {name!r}: expected one of {', '.join(backends)}")
    return backends[name]()


class Session:
    """One backend at one (nodes, sync), reused for every size of the sweep."""

    shared_devices: bool | None = False
    # How this session times an out-of-place call (the table's out-of-place group), or None
    # when it cannot: then that group reads N/A.
    out_of_place: ClassVar[str | None] = None

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def call(self) -> None:
        raise NotImplementedError

    def timed_call(self) -> None:
        raise NotImplementedError

    def timed_out_of_place(self) -> None:
        """One timed call out of place: the results land in buffers other than the inputs
        (the receive buffers), which stay as they were (the send buffers)."""
        raise NotImplementedError

    def times(self) -> list[float]:
        raise NotImplementedError

    def rank_times(self) -> np.ndarray | None:
        """Every rank's time of every timed call, (ranks, calls) seconds, after
        :meth:`times`; None where one process times every node's call as one."""
        return None

    def results(self) -> list[np.ndarray]:
        raise NotImplementedError

    def keep_sample(self, windows: Sequence[tuple[int, int]]) -> None:
        """After each timed call, outside the timed region: keep this process's results in
        ``windows`` (``[start, stop)`` element ranges), so ``-c`` checks every call, not only
        the last.  Device sessions override it to copy only the windows back."""
        kept = self.__dict__.setdefault("_samples", [])
        kept.append([np.concatenate([r[a:b] for a, b in windows]) for r in self.results()])

    def take_samples(self) -> list[list[np.ndarray]]:
        """What :meth:`keep_sample` kept since the last take, per call and node."""
        return self.__dict__.pop("_samples", [])

    def row_extras(self) -> dict[str, Any]:
        return {}

    def planning(self) -> bool:
        """Whether ``algorithm="auto"`` is still measuring its candidates for this point's
        call (ring.planning): the harness calls on, untimed, until it has planned."""
        return False

    def release(self) -> None:
        """Drop this point's buffers: the harness measures other series before the next
        size comes back to this one."""

    def close(self) -> None:
        pass

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class HostSession(Session):
    """Working buffers are host NumPy copies of the inputs; time is ``perf_counter``.

    Out of place, the pristine inputs are the send buffers and the working buffers the
    receive buffers: the library reduces in place, so a timed out-of-place call copies the
    inputs into the working buffers and reduces those, the copy inside the timed region.
    """

    shared_devices = None  # no device: the rows leave the column empty
    out_of_place = "copy send->recv, then the in-place allreduce of recv, both timed"
    # Set while timed_call times an out-of-place call (the copy inside the clock).
    _copy_in = False

    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        self.nodes = nodes
        self.sync = sync
        self.dtype = config.dtype
        self.op = config.op
        self.ufunc = resolve_op(config.op, config.dtype)
        self.world = world
        self.buffers: list[np.ndarray] = []
        self._inputs: list[np.ndarray] = []
        self._times: list[float] = []
        # Threads (or ranks on this host) that run the collective, and whether each is held
        # to one core: the placement columns of every row (ring.bench.placement).
        self.workers = nodes
        self.pinned = False

    def row_extras(self) -> dict[str, Any]:
        return {"threads_per_core": threads_per_core(self.workers), "pinned": self.pinned}

    def collective(self) -> None:
        """One allreduce over ``self.buffers`` (this process's nodes)."""
        raise NotImplementedError

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        self.buffers = []
        self._inputs = list(inputs)
        self.buffers = [self.empty_like(values) for values in self._inputs]
        self._times = []

    def empty_like(self, values: np.ndarray) -> np.ndarray:
        """A working buffer for ``values`` (a session may put it elsewhere in memory)."""
        return np.empty_like(values)

    def restore(self) -> None:
        for buffer, values in zip(self.buffers, self._inputs, strict=True):
            np.copyto(buffer, values)

    def call(self) -> None:
        self.collective()

    def collective_out_of_place(self) -> None:
        """The inputs (send) reduced into the working buffers (receive): copied, then
        reduced in place; a backend whose library reduces out of place itself overrides it."""
        self.restore()
        self.collective()

    def timed_call(self) -> None:
        start = time.perf_counter()
        if self._copy_in:
            self.collective_out_of_place()
        else:
            self.collective()
        self._times.append(time.perf_counter() - start)

    def timed_out_of_place(self) -> None:
        # Through timed_call, so a session that wraps it (a test's fault) wraps both.
        self._copy_in = True
        try:
            self.timed_call()
        finally:
            self._copy_in = False

    def times(self) -> list[float]:
        return list(self._times)

    def results(self) -> list[np.ndarray]:
        return self.buffers

    def release(self) -> None:
        self.buffers = []
        self._inputs = []


class MpiSession(HostSession):
    """A host session on one MPI rank: a barrier before each timed call lines the ranks
    up; every rank times each call, and a call lasts as long as ``-a`` says (default: its
    slowest rank).  The row also gets OSU's ``-f`` statistics: the minimum, average and
    maximum over ranks of each rank's mean time
    (:data:`~ring.bench.nccl_compat.RANK_MEAN_COLUMNS`), and where its buffers live."""

    buffers_kind = "host"  # the --buffers kind (ring.bench.backends.mpi_device)

    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        super().__init__(nodes, sync, config, world)
        self.average = config.average
        self._rank_times = np.empty((0, 0))
        self.workers = world.local_size
        self.pinned = rank_is_bound()

    def shared_array(self, count: int, dtype) -> np.ndarray:
        """An array in memory every rank on the host maps (``--buffers shared``)."""
        from ...mpi.shared import allocate  # only for that option

        return allocate(self.world.comm, count, dtype)[0]

    def timed_call(self) -> None:
        self.world.barrier()
        start = time.perf_counter()
        if self._copy_in:
            self.collective_out_of_place()
        else:
            self.collective()
        self._times.append(time.perf_counter() - start)

    def times(self) -> list[float]:
        self._rank_times = self.world.gather_rows(np.asarray(self._times))
        return [float(t) for t in aggregate_ranks(self._rank_times, self.average)]

    def rank_times(self) -> np.ndarray | None:
        return self._rank_times if self._rank_times.size else None

    def row_extras(self) -> dict[str, Any]:
        stats = rank_mean_stats(self._rank_times) if self._rank_times.size else {}
        return {**stats, "buffers": self.buffers_kind}


class DeviceSession(Session):
    """A session whose working buffers are CuPy arrays (``self.cupy``, ``self.buffers``)."""

    cupy: Any
    buffers: list

    def synchronize(self) -> None:
        """Wait for the calls in flight before reading the buffers (when the host does
        not wait after each call)."""

    def keep_sample(self, windows: Sequence[tuple[int, int]]) -> None:
        # Only the windows come back: a whole-buffer copy per call would dwarf the call.
        self.synchronize()
        kept = self.__dict__.setdefault("_samples", [])
        asnumpy = self.cupy.asnumpy
        kept.append(
            [np.concatenate([asnumpy(b[lo:hi]) for lo, hi in windows]) for b in self.buffers]
        )


class Backend:
    """Base class of a backend plugin; see the module docstring for the contract."""

    variant: dict[str, Any] = {}  # noqa: RUF012 - replaced, never mutated
    # The algorithm the next open() runs (one of ``algorithms``), set by the loop.
    algorithm: str = ""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    traffic: ClassVar[str | None] = None
    sync_modes: ClassVar[tuple[str, ...]] = ()
    algorithms: ClassVar[tuple[str, ...]] = ()
    needs_mpirun: ClassVar[bool] = False
    extra_columns: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def add_arguments(cls, parser) -> None:
        pass

    def check(self, config: BenchConfig, world) -> None:
        pass

    def traffic_bytes(self, nbytes: int, nodes: int) -> int | None:
        return None

    def ceilings(self, config: BenchConfig, world) -> dict[str, Any]:
        return {}

    def traffic_ceiling(self, ceilings: dict[str, Any]) -> tuple[str, float | None]:
        """The ceiling ``traffic_GBps`` is compared with in the footer: host memory's
        in-place add bandwidth unless the backend's buffers live elsewhere."""
        return "add", ceilings.get("add_GBps")

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        raise NotImplementedError

    def session_out_of_place(self) -> str | None:
        """How this backend's sessions time a call out of place (their ``out_of_place``),
        or None when they cannot; read before any session is opened."""
        return getattr(self, "session_class", HostSession).out_of_place

    def variants(self, config: BenchConfig, algorithm: str = "") -> tuple[dict[str, Any], ...]:
        """The series this backend measures of ``algorithm`` per (sync, N): one per value
        of its own flags (``--executor nodes,slices``...), or one."""
        return ({},)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            "description": cls.description,
            "traffic": cls.traffic,
            "sync_modes": list(cls.sync_modes),
            "algorithms": list(cls.algorithms),
            "needs_mpirun": cls.needs_mpirun,
        }
