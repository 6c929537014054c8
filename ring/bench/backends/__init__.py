"""Backends of the harness: plugins that one measuring loop drives.

A backend is one way to allreduce N buffers: our ring on threads (``cpu``), on MPI ranks
(``mpi``) or on CUDA devices (``gpu``), or a peer (``numpy-direct``, ``mpi-allreduce``,
``nccl``, ``seed-cpp``).  The loop in :mod:`ring.bench.runner` never names a backend; it
only calls the interface below, which :mod:`.base` implements.  One module per backend
(:mod:`.cpu`, :mod:`.numpy_direct`, :mod:`.mpi_allreduce`, :mod:`.mpi_ring`, :mod:`.gpu`,
:mod:`.nccl`; the compiled ``seed-cpp`` peer is the package :mod:`ring.bench.seed_cpp`,
beside its C++ source and build cache) and :mod:`.mpi_device`, what the two MPI backends
share (:class:`~.mpi_device.MpiBackend`, ``--buffers device``).

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
an ``mpirun`` launch (such a module registers its class with :func:`.register_backend`).

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
    ``algorithms``      the values of ``--algorithm`` it runs (the library's names,
                        :mod:`ring.bench.algorithms`), its default first; empty for a peer
                        that runs one algorithm of its own (the CSV's ``algorithm`` column
                        then carries the backend's name).
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
                        block, ``variant == {}``.  Likewise the loop sets
                        ``backend.algorithm`` before each ``open`` (and before
                        ``traffic_bytes`` for that series' rows).

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
    3. ``call()`` ``-w`` times (warm-up, untimed), then (unless ``--out-of-place 0``)
       ``timed_out_of_place()`` ``-n`` times without restores, then ``timed_call()``
       ``-n`` times; ``--rounds`` splits both alike.  Out of place the results land in
       the working buffers (receive) while the pristine inputs (send) stay as they were:
       :class:`HostSession` copies send into receive inside the timed region and reduces
       in place (its class attribute ``out_of_place`` says how, for the table's header);
       ``nccl`` passes both to NCCL; a session that cannot leaves ``out_of_place`` None
       and its out-of-place group reads N/A.
       ``timed_call`` times one collective with the backend's own clock and keeps the
       result: host ``time.perf_counter`` around a synchronous call on the CPU; CUDA
       events recorded on the stream around the call for a GPU backend (no host
       synchronisation inside the loop); MPI: ``MPI_Barrier`` before the call (untimed),
       ``perf_counter`` around it on every rank.
    4. ``times()``: the seconds of each timed call (out of place and in place) since
       ``load``, in order.  A GPU backend synchronises once here and reads its events; an
       MPI backend returns each call's time over ranks as ``-a`` says (an MPI-wide
       collective, so every rank gets the same list) and ``rank_times()`` every rank's.
    5. ``results()``: host NumPy arrays of this process's nodes after the last timed
       call (all N, or the rank's own), copied back from a device if needed.  The harness
       validates each against the float64 reference it computed with plain NumPy
       (:mod:`ring.bench.data`) and sums the wrong elements over ranks.  With ``-c`` it
       also calls ``keep_sample(windows)`` after every timed call (untimed) and checks
       each call's kept elements (``take_samples()``), so a wrong call among many is seen.
    ``shared_devices`` (attribute): on device sessions, True when several nodes share one
    GPU (device-local copies, not a link, move their data); None on host sessions, whose
    rows leave the column empty (``mpi_hosts`` in the JSON says whether MPI ranks shared one
    machine).  ``row_extras()`` returns the values of
    ``extra_columns``.  ``close()`` frees threads, devices and buffers.

:class:`HostSession` implements all of this for host NumPy buffers,
:class:`MpiSession` adds the barrier and the ``-a`` aggregate over ranks, and :class:`DeviceSession`
copies only the checked windows back from a device; a new host or MPI backend only writes
``collective()``.  Tests inject a wrong reduction by registering a backend
whose ``collective()`` is broken (see ``tests/test_bench.py``).
"""

from .base import (
    ENTRY_POINT_GROUP,
    PLUGIN_MODULES,
    VARIANT_COLUMNS,
    Backend,
    DeviceSession,
    HostSession,
    MpiSession,
    Session,
    available_backends,
    get_backend,
    register_backend,
    unregister_backend,
)

# The backends that need no optional package register when the package is imported.
from .cpu import CpuBackend, CpuSession, ring_traffic_bytes
from .mpi_allreduce import MpiAllreduceBackend, MpiAllreduceSession, mpi_datatype
from .numpy_direct import NumpyDirectBackend, NumpyDirectSession

__all__ = [
    "ENTRY_POINT_GROUP",
    "PLUGIN_MODULES",
    "VARIANT_COLUMNS",
    "Backend",
    "CpuBackend",
    "CpuSession",
    "DeviceSession",
    "HostSession",
    "MpiAllreduceBackend",
    "MpiAllreduceSession",
    "MpiSession",
    "NumpyDirectBackend",
    "NumpyDirectSession",
    "Session",
    "available_backends",
    "get_backend",
    "mpi_datatype",
    "register_backend",
    "ring_traffic_bytes",
    "unregister_backend",
]
