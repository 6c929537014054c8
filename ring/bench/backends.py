"""Backends of the harness: plugins that one measuring loop drives.

A backend is one way to allreduce N buffers (our ring on threads, a peer such as
``numpy-direct`` or ``MPI_Allreduce``, later our ring on GPUs or MPI ranks, NCCL).  The
loop in :mod:`ring.bench.runner` never names a backend; it only calls the interface below.

Adding a backend
================

Subclass :class:`Backend` and declare it as an entry point of the group
``ring.bench.backends`` in your package's metadata, named as the backend::

    [project.entry-points."ring.bench.backends"]
    my-backend = "my_package.module:MyBackend"

The harness loads every installed entry point of the group the first time the registry is
read.  Modules named in the environment variable ``RING_BENCH_PLUGINS`` (comma list) are
imported after them and may replace an installed backend of the same name: an override
for code that is not installed, which is how a test hands a broken backend to the ranks of
an ``mpirun`` launch (such a module registers its class with :func:`register_backend`).

Import optional packages (cupy, mpi4py, nccl) inside :meth:`Backend.check` /
:meth:`Backend.open`, never at module level, so ``python -m ring.bench --backend cpu``
works with numpy alone.

Class attributes
    ``name``            the ``--backend`` value and the CSV ``backend`` column.
    ``description``     one line for ``--help`` and the JSON.
    ``traffic``         the formula behind :meth:`Backend.traffic_bytes`, for humans
                        (``"5(N-1)·S"``), or None when unknown.
    ``sync_modes``      the values of ``--sync`` it accepts, its default first; empty
                        when it has no choice (the CSV then says ``sync=none``).
    ``needs_mpirun``    True for backends whose nodes are MPI ranks: the run must be
                        launched by ``mpirun -n N``, ``--nodes`` defaults to (and must
                        equal) the world size, and such backends cannot share a run with
                        single-process ones.  Rank 0 prints and writes the files.
    ``extra_columns``   names of CSV columns beyond :data:`ring.bench.results.COLUMNS`
                        that its sessions fill through :meth:`Session.row_extras`.

Methods (all ranks call each one, in the same order, under ``mpirun``)
    ``add_arguments(parser)`` (classmethod, optional)  flags of this backend, e.g.
                        ``parser.add_argument("--shared-devices", default="0")``; every
                        registered backend's flags are accepted, whichever ``--backend``
                        is chosen, and the parsed values appear as ``config.<dest>``
                        (and under ``options`` in the JSON's ``config``); check the value
                        in ``check``.
    ``check(config, world)``    raise :class:`~ring.bench.cli.BenchInputError` (or
                        :class:`~ring._optional.MissingDependencyError`) with one clear
                        line if this backend cannot run this configuration here (missing
                        package, no device, unsupported dtype or op).  Runs before
                        anything is measured or written; the command then exits 2.
    ``traffic_bytes(nbytes, nodes)``  bytes the algorithm reads plus writes in memory
                        for one call with per-node size ``nbytes``, giving the
                        ``traffic_GBps`` column, or None if unknown, counted as
                        :mod:`ring.bench.ceilings` counts its kernels.  cpu ring
                        allreduce: 3(N-1)·S reduce-scatter + 3(N-1)·S all-gather (2(N-1)·S
                        where chunks reach glibc's non-temporal memcpy threshold);
                        numpy-direct: 2N·S (read every input once, write every output once).
    ``ceilings(config, world)`` extra ceilings measured in this run (e.g. a GPU
                        backend's device-to-device and peer bandwidth), merged into the
                        JSON's ``ceilings`` next to the harness's CPU ``copy_GBps`` and
                        ``add_GBps``.  Missing values are None, never invented.
    ``open(nodes, sync, config, world)``  a :class:`Session` for one (nodes, sync); the
                        loop uses it for every size, then closes it.
    ``variants(config)``  settings measured one after another in one run, each as its own
                        block of rows (the gpu backend's ``--graphs 0,1``); the loop sets
                        ``backend.variant`` to each before ``open``, and the sessions
                        report it in a column of :data:`VARIANT_COLUMNS`.  Default: one
                        block, ``variant == {}``.

The session protocol, for each size (one "point")
    1. ``load(inputs)``: ``inputs`` are host NumPy arrays, fresh random non-zero data the
       harness drew from ``--seed`` (:func:`ring.bench.data.make_input`): all N of them
       in a single-process run, ``[inputs[rank]]`` under mpirun (a rank owns node
       ``rank``).  The session keeps them as the pristine copy (the harness never
       modifies them) and makes its own working buffers (host copies, device arrays),
       dropping the previous size's buffers first.
    2. ``restore()`` before every call, warm-up and timed, outside the timed region: the
       working buffers get the inputs back, so every call reduces the same data and
       in-place ops cannot compound (a product would overflow).
    3. ``call()`` ``-w`` times (warm-up, untimed), then ``timed_call()`` ``-n`` times.
       ``timed_call`` times one collective with the backend's own clock and keeps the
       result: host ``time.perf_counter`` around a synchronous call on the CPU; CUDA
       events recorded on the stream around the call for a GPU backend (no host
       synchronisation inside the loop); MPI: ``MPI_Barrier`` before the call (untimed),
       ``perf_counter`` around it on every rank.
    4. ``times()``: the seconds of each ``timed_call`` since ``load``, in order.  A GPU
       backend synchronises once here and reads its events; an MPI backend returns the
       maximum over ranks of each call (an MPI-wide collective, so every rank gets the
       same list).
    5. ``results()``: host NumPy arrays of this process's nodes after the last timed
       call (all N, or the rank's own), copied back from a device if needed.  The harness
       validates each against the float64 reference it computed with plain NumPy
       (:mod:`ring.bench.data`) and sums the wrong elements over ranks.  With ``-c`` it
       also calls ``keep_sample(windows)`` after every timed call (untimed) and checks
       each call's kept elements (``take_samples()``), so a wrong call among many is seen.
    ``shared_devices`` (attribute): True when several nodes share one memory or device
    (threads in one process, logical nodes on one GPU, ranks on one host), where memory
    traffic, not a link, is the honest ceiling.  ``row_extras()`` returns the values of
    ``extra_columns``.  ``close()`` frees threads, devices and buffers.

:class:`HostSession` implements all of this for host NumPy buffers and
:class:`MpiSession` adds the barrier and the max over ranks; a new host or MPI backend
only writes ``collective()``.  Tests inject a wrong reduction by registering a backend
whose ``collective()`` is broken (see ``tests/test_bench.py``).
"""

from __future__ import annotations

import importlib
import os
import time
import warnings
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..cpu import SYNC_MODES, CpuCommunicator
from ..ops import resolve_op
from ..schedule import chunk_range
from .ceilings import copy_traffic_bytes
from .cli import BenchInputError
from .mpi_device import add_buffers_argument, check_buffers, device_session
from .nccl_compat import RANK_MEAN_COLUMNS, aggregate_ranks, rank_mean_stats
from .parallel import WorkerPool
from .placement import pin_native_threads, rank_is_bound, threads_per_core

if TYPE_CHECKING:
    from .cli import BenchConfig

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_MODULES",
    "Backend",
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
    "ring.bench.mpi_ring",
    "ring.bench.gpu",
    "ring.bench.nccl",
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

    shared_devices: bool = False

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        raise NotImplementedError

    def restore(self) -> None:
        raise NotImplementedError

    def call(self) -> None:
        raise NotImplementedError

    def timed_call(self) -> None:
        raise NotImplementedError

    def times(self) -> list[float]:
        raise NotImplementedError

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
    """Working buffers are host NumPy copies of the inputs; time is ``perf_counter``."""

    shared_devices = True

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
        self.buffers = [np.empty_like(values) for values in self._inputs]
        self._times = []

    def restore(self) -> None:
        for buffer, values in zip(self.buffers, self._inputs, strict=True):
            np.copyto(buffer, values)

    def call(self) -> None:
        self.collective()

    def timed_call(self) -> None:
        start = time.perf_counter()
        self.collective()
        self._times.append(time.perf_counter() - start)

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
    maximum over ranks of each rank's mean time (:data:`RANK_MEAN_COLUMNS`)."""

    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        super().__init__(nodes, sync, config, world)
        self.shared_devices = world.local_size > 1
        self.average = config.average
        self._rank_times = np.empty((0, 0))
        self.workers = world.local_size
        self.pinned = rank_is_bound()

    def timed_call(self) -> None:
        self.world.barrier()
        start = time.perf_counter()
        self.collective()
        self._times.append(time.perf_counter() - start)

    def times(self) -> list[float]:
        self._rank_times = self.world.gather_rows(np.asarray(self._times))
        return [float(t) for t in aggregate_ranks(self._rank_times, self.average)]

    def row_extras(self) -> dict[str, Any]:
        return rank_mean_stats(self._rank_times) if self._rank_times.size else {}


# Columns that tell apart rows of one (backend, sync, nodes, dtype, op, bytes): a
# backend's variants (see ``variants`` above).  Absent from a CSV means one variant.
VARIANT_COLUMNS = ("graphs",)


class Backend:
    """Base class of a backend plugin; see the module docstring for the contract."""

    variant: dict[str, Any] = {}  # noqa: RUF012 - replaced, never mutated

    name: ClassVar[str]
    description: ClassVar[str] = ""
    traffic: ClassVar[str | None] = None
    sync_modes: ClassVar[tuple[str, ...]] = ()
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

    def variants(self, config: BenchConfig) -> tuple[dict[str, Any], ...]:
        return ({},)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            "description": cls.description,
            "traffic": cls.traffic,
            "sync_modes": list(cls.sync_modes),
            "needs_mpirun": cls.needs_mpirun,
        }


# -- cpu: our ring ---------------------------------------------------------------------


class CpuSession(HostSession):
    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        super().__init__(nodes, sync, config, world)
        self.communicator = CpuCommunicator(nodes, sync=sync)
        if pin_requested(config) and nodes > 1:
            # The communicator's worker threads, one per node (a caller only waits).
            threads = self.communicator._threads
            self.pinned = pin_native_threads(t.native_id for t in threads)

    def collective(self) -> None:
        self.communicator.allreduce(self.buffers, self.op)

    def close(self) -> None:
        self.communicator.close()


def pin_requested(config: BenchConfig) -> bool:
    value = config.options.get("pin", "0")
    if value not in ("0", "1"):
        raise BenchInputError(f"--pin must be 0 or 1, got {value!r}")
    return value == "1"


def ring_traffic_bytes(nbytes: int, nodes: int, threshold: int | None = None) -> int:
    """Memory-bus bytes of one ring allreduce of ``nbytes`` per node over one memory."""
    if nodes < 2:
        return 0
    # Each chunk is copied to the N-1 other nodes; chunk sizes differ by at most one unit.
    chunks = [nbytes // nodes + (c < nbytes % nodes) for c in range(nodes)]
    copies = sum(copy_traffic_bytes(chunk, threshold) for chunk in chunks)
    return 3 * (nodes - 1) * nbytes + (nodes - 1) * copies


@register_backend
class CpuBackend(Backend):
    name = "cpu"
    description = "our ring on one persistent thread per node (ring.CpuCommunicator)"
    # Reduce-scatter: a += b in place, 3 bytes per byte; all-gather: memcpy of each chunk,
    # 3 bytes per byte below glibc's non-temporal threshold and 2 from it up (the
    # convention of ring.bench.ceilings, so the series and the ceilings count alike).
    traffic = "3(N-1)·S + 3(N-1)·S (2(N-1)·S for chunks at or above the memcpy NT threshold)"
    sync_modes = SYNC_MODES

    @classmethod
    def add_arguments(cls, parser) -> None:
        if "--pin" in parser._option_string_actions:
            return  # a subclass registered as another backend adds it again
        parser.add_argument(
            "--pin",
            default="0",
            help="1: hold each worker thread of cpu and numpy-direct to one core "
            "(round robin; the rows say pinned=true where the OS allowed it); default 0",
        )

    def check(self, config: BenchConfig, world) -> None:
        pin_requested(config)

    def traffic_bytes(self, nbytes: int, nodes: int) -> int:
        return ring_traffic_bytes(nbytes, nodes)

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return CpuSession(nodes, sync, config, world)


# -- numpy-direct: the shared-memory optimum ---------------------------------------------

# Below this many bytes per part, handing work to another thread costs more than it saves.
NUMPY_DIRECT_MIN_PART_BYTES = 1 << 20
# Each block of buffer 0 accumulates all N inputs while it sits in the L2 cache, so memory
# sees every input read once and every output written once.
NUMPY_DIRECT_BLOCK_BYTES = 128 << 10


class NumpyDirectSession(HostSession):
    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        super().__init__(nodes, sync, config, world)
        self.pool = WorkerPool()
        self.workers = self.pool.threads
        if pin_requested(config):
            # Parts 1.. run on the pool's threads, part 0 on the caller, which keeps its
            # mask: threads started later (another session's) inherit it.
            self.pinned = pin_native_threads(self.pool.native_ids, first=1)
        self._block = max(1, NUMPY_DIRECT_BLOCK_BYTES // config.dtype.itemsize)
        self._parts = 1
        self._bounds: list[tuple[int, int]] = []

    def load(self, inputs: Sequence[np.ndarray]) -> None:
        super().load(inputs)
        count = self._inputs[0].shape[0]
        nbytes = count * self.dtype.itemsize
        self._parts = min(self.pool.threads, max(1, nbytes // NUMPY_DIRECT_MIN_PART_BYTES))
        self._bounds = [chunk_range(count, self._parts, p) for p in range(self._parts)]

    def _reduce_part(self, part: int) -> None:
        start, stop = self._bounds[part]
        first, others = self.buffers[0], self.buffers[1:]
        ufunc = self.ufunc
        for a in range(start, stop, self._block):
            b = min(a + self._block, stop)
            acc = first[a:b]
            for buffer in others:
                ufunc(acc, buffer[a:b], out=acc)
            for buffer in others:
                buffer[a:b] = acc

    def collective(self) -> None:
        if self.nodes > 1:
            self.pool.run(self._reduce_part, self._parts)

    def close(self) -> None:
        self.pool.close()


@register_backend
class NumpyDirectBackend(Backend):
    name = "numpy-direct"
    description = (
        "each block reduced once across all N buffers with one ufunc per input and written "
        "back to every buffer, on as many threads as cores"
    )
    traffic = "2N·S"

    def traffic_bytes(self, nbytes: int, nodes: int) -> int:
        return 2 * nodes * nbytes if nodes > 1 else 0

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return NumpyDirectSession(nodes, sync, config, world)


# -- mpi-allreduce: what an MPI user calls -----------------------------------------------


def _mpi_op(MPI, op: str):
    return {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[op]


class MpiAllreduceSession(MpiSession):
    def __init__(self, nodes: int, sync: str, config: BenchConfig, world):
        super().__init__(nodes, sync, config, world)
        MPI = world.MPI
        self._op = _mpi_op(MPI, config.op)
        self._datatype = mpi_datatype(MPI, config.dtype)
        self._in_place = MPI.IN_PLACE

    def collective(self) -> None:
        for buffer in self.buffers:
            self.world.comm.Allreduce(self._in_place, [buffer, self._datatype], op=self._op)


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
class MpiAllreduceBackend(Backend):
    name = "mpi-allreduce"
    description = "MPI_Allreduce (in place) through mpi4py, one rank per node, under mpirun"
    traffic = None  # the MPI library's algorithm and its shared-memory copies are hidden
    needs_mpirun = True
    extra_columns = RANK_MEAN_COLUMNS

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_buffers_argument(parser)

    def check(self, config: BenchConfig, world) -> None:
        MPI = world.MPI
        datatype = mpi_datatype(MPI, config.dtype)
        if datatype is None or not _reduces(world, datatype, config):
            raise BenchInputError(
                f"backend mpi-allreduce: this MPI library cannot reduce {config.dtype.name} "
                f"with {config.op!r}; use another -d/--dtype or -o/--op"
            )
        check_buffers(config, self.name)

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        return device_session(MpiAllreduceSession, config)(nodes, sync, config, world)
