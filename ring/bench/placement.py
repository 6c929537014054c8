"""Where the threads and ranks of a run sit: cores, oversubscription, pinning.

A point with more worker threads (or ranks) than cores times the operating system's
scheduler as much as the algorithm: its scaling with N says little about the ring.  Every row
records ``threads_per_core`` so the report can mark such points, and ``pinned`` says whether
each worker was held to one core (``--pin 1`` for the threaded backends; under ``mpirun`` the
launcher's own binding is read back).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .cli import BenchInputError

if TYPE_CHECKING:
    from .cli import BenchConfig

__all__ = [
    "add_pin_argument",
    "machine_cores",
    "pin_native_threads",
    "pin_requested",
    "rank_is_bound",
    "threads_per_core",
]


@functools.cache
def machine_cores() -> tuple[int, ...]:
    """The cores this process may be given, even when a launcher bound it to fewer.

    Asked from a throwaway thread (Linux affinity is per thread), which widens its own mask to
    every CPU; the kernel keeps it within the cgroup's cpuset.
    """
    if not hasattr(os, "sched_setaffinity"):  # pragma: no cover - not Linux
        return tuple(range(os.cpu_count() or 1))
    found: list[int] = []

    def probe() -> None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
        found.extend(sorted(os.sched_getaffinity(0)))

    thread = threading.Thread(target=probe, name="ring-core-probe")
    thread.start()
    thread.join()
    return tuple(found or [0])


def threads_per_core(workers: int) -> float:
    """Worker threads (or ranks on this host) per core; above 1 the run is oversubscribed."""
    return workers / len(machine_cores())


def pin_native_threads(native_ids: Iterable[int], first: int = 0) -> bool:
    """Hold the i-th thread to core ``first + i`` (round robin); False where the OS refuses."""
    cores = machine_cores()
    try:
        for i, native_id in enumerate(native_ids, start=first):
            os.sched_setaffinity(native_id, {cores[i % len(cores)]})
    except (OSError, AttributeError):
        return False
    return True


def rank_is_bound() -> bool:
    """Whether this process may run on one core only (an MPI launcher's binding)."""
    try:
        return len(os.sched_getaffinity(0)) == 1
    except AttributeError:  # pragma: no cover - not Linux
        return False


def add_pin_argument(parser) -> None:
    """The ``--pin`` flag of the threaded backends (cpu and numpy-direct), once."""
    if "--pin" in parser._option_string_actions:
        return
    parser.add_argument(
        "--pin",
        default="0",
        help="1: hold each worker thread of cpu and numpy-direct to one core "
        "(round robin; the rows say pinned=true where the OS allowed it); default 0",
    )


def pin_requested(config: BenchConfig) -> bool:
    value = config.options.get("pin", "0")
    if value not in ("0", "1"):
        raise BenchInputError(f"--pin must be 0 or 1, got {value!r}")
    return value == "1"
