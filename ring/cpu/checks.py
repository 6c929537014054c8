"""The checks of a cpu call's inputs, made before any thread is woken so that bad input
leaves every buffer untouched: the options of a communicator (:class:`CpuOptions`, checked
once) and of a call (:func:`call_options`, once per collective and options), and the call's
buffers and op (:func:`check_call`, :func:`checked_call`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..communicator import (
    Call,
    check_buffer_list,
    check_nodes,
    flattened,
    normalized_op,
    refuse_gpu_options,
    validate_buffers,
)
from ..ops import AVERAGING, resolve_op
from ..planning.race import check_planning
from ..schedule import (
    EXECUTORS,
    check_algorithm,
    check_algorithm_options,
    check_collective,
)
from ..schedule.steps import check_int

__all__ = [
    "EXECUTORS",
    "INLINE_BYTES",
    "SYNC_MODES",
    "CpuOptions",
    "algorithm_options",
    "call_options",
    "check_call",
    "check_executor",
    "check_options",
    "check_sync",
    "checked_call",
    "communicator_options",
]

SYNC_MODES = ("pairwise", "barrier")
_OPTIONS = frozenset(
    {"sync", "algorithm", "segment_bytes", "group_size", "inline_bytes", "executor", "planning"}
)
# A call's options that auto's plan decides, not the algorithm's own.
_PLANNED_OPTIONS = frozenset({"algorithm", "inline_bytes", "executor", "planning"})
# Calls of at most this many bytes per node run on the calling thread (inline_bytes) unless
# the caller says otherwise or auto measures where this machine's crossover lies: a
# starting guess (below it, waking the workers costs more than the second core's share of
# the memory bandwidth gives back; python -m ring.bench --inline-bytes 64M,0 measures it).
INLINE_BYTES = 4 << 20


def check_sync(sync: object) -> str:
    if not isinstance(sync, str) or sync not in SYNC_MODES:
        raise ValueError(f"unknown sync {sync!r}: expected one of {', '.join(SYNC_MODES)}")
    return sync


def check_executor(executor: object) -> str:
    if not isinstance(executor, str) or executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    return executor


def check_options(options: dict, nodes: int, collective: str | None = None) -> tuple:
    """(sync, algorithm, the algorithm's options, inline_bytes, executor, planning), or one
    line saying what is wrong."""
    unknown = set(options) - _OPTIONS
    if unknown:
        refuse_gpu_options("cpu", unknown)
        raise TypeError(
            f"unknown option(s) for backend 'cpu': {', '.join(sorted(unknown))} "
            f"(options: {', '.join(sorted(_OPTIONS))})"
        )
    sync = check_sync(options.get("sync", "pairwise"))
    algorithm = check_algorithm(options.get("algorithm", "ring"), collective)
    extra = {k: v for k, v in options.items() if k in ("segment_bytes", "group_size")}
    inline = options.get("inline_bytes")
    inline = INLINE_BYTES if inline is None else check_int("inline_bytes", inline, 0)
    executor = check_executor(options.get("executor") or "nodes")
    planning = check_planning(options.get("planning", "measure"))
    extra = check_algorithm_options(algorithm, nodes, extra)
    return sync, algorithm, extra, inline, executor, planning


def algorithm_options(call: Call) -> dict:
    """A call's options that the algorithm takes (segment_bytes, group_size): the rest
    say what runs, which auto's plan decides when it measures."""
    return {k: v for k, v in call.options.items() if k not in _PLANNED_OPTIONS}


def check_call(name: str, buffers: Sequence[np.ndarray], op: str | None, **options) -> Call:
    """Validate a call's options, buffers and op before any thread is woken, so bad input
    leaves every buffer untouched.  Every collective but all_gather reduces, so ``op``
    must name an op (None is not one)."""
    check_collective(name)
    nodes = check_buffer_list(buffers)
    buffers, op = flattened(list(buffers)), normalized_op(op)
    return checked_call(name, buffers, op, call_options(options, nodes, name))


def call_options(options: dict, nodes: int, name: str) -> dict:
    """A call's options, checked for ``name``, as a communicator's call reads them:
    an executor, threshold or planning the call does not give is the communicator's."""
    _, algorithm, extra, inline, executor, planning = check_options(options, nodes, name)
    given = {"inline_bytes": inline, "executor": executor, "planning": planning}
    return {"algorithm": algorithm, **extra} | {
        k: v for k, v in given.items() if options.get(k) is not None
    }


def checked_call(name: str, buffers: Sequence[np.ndarray], op: str | None, options: dict) -> Call:
    """The call, once its buffers and op pass (its options passed already)."""
    count, dtype = validate_buffers(buffers)
    ufunc = resolve_op(op, dtype) if name != "all_gather" else None
    average = ufunc is not None and op in AVERAGING
    return Call("cpu", name, buffers, op, len(buffers), options, checked=(ufunc, count, average))


@dataclass(frozen=True)
class CpuOptions:
    """A CPU communicator's options, checked (:func:`communicator_options`): ``None`` for an
    ``inline_bytes`` or ``executor`` not given, which ``auto`` then plans over."""

    sync: str = "pairwise"
    algorithm: str = "ring"
    algorithm_options: tuple[tuple[str, int], ...] = ()
    inline_bytes: int | None = None
    executor: str | None = None
    planning: str = "measure"

    def arguments(self) -> dict:
        """The options as :class:`CpuCommunicator` takes them."""
        return {
            "sync": self.sync,
            "algorithm": self.algorithm,
            **dict(self.algorithm_options),
            "inline_bytes": self.inline_bytes,
            "executor": self.executor,
            "planning": self.planning,
        }


def communicator_options(nodes: int, options: dict) -> CpuOptions:
    """``options`` of a CPU communicator of ``nodes`` nodes, checked once."""
    nodes = check_nodes(nodes)
    sync, algorithm, extra, inline, executor, planning = check_options(options, nodes)
    return CpuOptions(
        sync,
        algorithm,
        tuple(sorted(extra.items())),
        inline if options.get("inline_bytes") is not None else None,
        executor if options.get("executor") else None,
        planning,
    )
