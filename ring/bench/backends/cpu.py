"""Backend ``cpu``: our algorithms on one persistent thread per node
(:class:`ring.CpuCommunicator`), and calls of at most ``--inline-bytes`` per node on the
calling thread; ``--executor slices`` runs them by position on as many threads as nodes
and cores allow instead.  A row says which ran: ``executor``, ``inline`` (1: the calling
thread), and its ``threads_per_core`` and ``pinned`` are those of the threads that did the
work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cpu import INLINE_BYTES, SYNC_MODES, CpuCommunicator, check_executor
from ...schedule import AUTO
from ..algorithms import RESOLVED_COLUMN, library_algorithms
from ..ceilings import copy_traffic_bytes
from ..flags import BenchInputError, parse_size, split_list
from ..placement import add_pin_argument, pin_native_threads, pin_requested
from .base import Backend, HostSession, Session, register_backend

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = [
    "CpuBackend",
    "CpuSession",
    "executors_requested",
    "inline_bytes_requested",
    "ring_traffic_bytes",
]


def inline_bytes_requested(config: BenchConfig) -> tuple[int, ...]:
    """``--inline-bytes`` (the cpu backend's flag): sizes, each measured as its own series."""
    text = str(getattr(config, "inline_bytes", "") or INLINE_BYTES)
    try:
        return tuple(parse_size(item) for item in split_list(text, "--inline-bytes"))
    except BenchInputError as exc:
        raise BenchInputError(f"--inline-bytes: {exc}") from None


def executors_requested(config: BenchConfig) -> tuple[str, ...]:
    """``--executor`` (the cpu backend's flag): executors, each measured as its own series."""
    text = str(getattr(config, "executor", "") or "nodes")
    try:
        return tuple(check_executor(item) for item in split_list(text, "--executor"))
    except (BenchInputError, ValueError) as exc:
        raise BenchInputError(f"--executor: {exc}") from None


class CpuSession(HostSession):
    def __init__(
        self,
        nodes: int,
        sync: str,
        config: BenchConfig,
        world,
        algorithm: str = "ring",
        inline_bytes: int | None = None,
        executor: str | None = "nodes",
    ):
        super().__init__(nodes, sync, config, world)
        self.communicator = CpuCommunicator(
            nodes, sync=sync, algorithm=algorithm, inline_bytes=inline_bytes, executor=executor
        )
        self.threads_pinned = False
        self.inline = False
        if pin_requested(config) and nodes > 1:
            # The communicator's worker threads, one per node (a caller only waits).
            threads = self.communicator.threads
            self.threads_pinned = pin_native_threads(
                t.native_id for t in threads if t.native_id is not None
            )
        self.pinned = self.threads_pinned

    def load(self, inputs) -> None:
        super().load(inputs)
        # The communicator's own rule (ring.cpu): at most inline_bytes per node runs on the
        # calling thread, which no --pin holds; the other rows ran on the N workers, or
        # by slices on the caller and some of them.
        nbytes = self.buffers[0].nbytes if self.buffers else 0
        self.inline = self.nodes > 1 and 0 < nbytes <= self.communicator.inline_bytes
        self.workers = self.communicator.threads_for(nbytes)
        slices = self.communicator.executor == "slices"
        self.pinned = self.threads_pinned and not self.inline and not slices

    def planning(self) -> bool:
        return self.communicator.measuring("allreduce", self.buffers, self.op)

    def row_extras(self) -> dict[str, Any]:
        inline = {"inline_bytes": self.communicator.inline_bytes, "inline": int(self.inline)}
        extras = {**super().row_extras(), **inline, "executor": self.communicator.executor}
        # What auto ran, as it measured it on this machine (ring.cpu.planning).
        planned = self.communicator.planned("allreduce", self.buffers, self.op)
        if planned is not None:
            extras[RESOLVED_COLUMN] = planned[0]
        return extras

    def collective(self) -> None:
        self.communicator.allreduce(self.buffers, self.op)

    def release(self) -> None:
        super().release()
        self.communicator.unbind()  # its bound call's views would keep the buffers alive

    def close(self) -> None:
        self.communicator.close()


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
    description = (
        "our algorithms on one persistent thread per node (ring.CpuCommunicator); calls of "
        "at most --inline-bytes per node on the calling thread"
    )
    # Reduce-scatter: a += b in place, 3 bytes per byte; all-gather: memcpy of each chunk,
    # 3 bytes per byte below glibc's non-temporal threshold and 2 from it up (the
    # convention of ring.bench.ceilings, so the series and the ceilings count alike).
    traffic = "3(N-1)·S + 3(N-1)·S (2(N-1)·S for chunks at or above the memcpy NT threshold)"
    sync_modes = SYNC_MODES
    algorithms = library_algorithms()
    extra_columns = ("inline_bytes", "inline")

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_pin_argument(parser)
        if "--inline-bytes" in parser._option_string_actions:
            return  # a subclass's (a test's backend) is the same flag
        parser.add_argument(
            "--executor",
            default="",
            help=(
                "backend cpu: nodes (one thread per node, the default) or slices (the plan "
                "run by position on as many threads as nodes and cores allow); a comma "
                "list (nodes,slices) measures each in turn (CSV column executor)"
            ),
        )
        parser.add_argument(
            "--inline-bytes",
            default="",
            help=(
                "backend cpu: calls of at most this many bytes per node run on the calling "
                "thread (rows say inline=1), 0 always on the worker threads; a comma list "
                "(4M,0) measures each in turn (CSV column inline_bytes); default "
                f"{INLINE_BYTES} (ring.cpu.INLINE_BYTES)"
            ),
        )

    def check(self, config: BenchConfig, world) -> None:
        pin_requested(config)
        inline_bytes_requested(config)
        executors_requested(config)

    def variants(self, config: BenchConfig, algorithm: str = "") -> tuple[dict[str, Any], ...]:
        # Only the flags given name a series (the defaults keep their plain names).
        inline = getattr(config, "inline_bytes", "") and inline_bytes_requested(config)
        executors = getattr(config, "executor", "") and executors_requested(config)
        if algorithm == AUTO:  # it measures among several: one series, not fixed
            inline = inline if len(inline or ()) == 1 else ()
            executors = executors if len(executors or ()) == 1 else ()
        return tuple(
            {**({"inline_bytes": i} if inline else {}), **({"executor": e} if executors else {})}
            for i in inline or (None,)
            for e in executors or (None,)
        )

    def traffic_bytes(self, nbytes: int, nodes: int) -> int | None:
        # The formula is the plain ring's on the node threads; the other algorithms'
        # traffic, and the bytes of a call run by slices, are not modelled.
        if self.variant.get("executor") == "slices":
            return None
        return ring_traffic_bytes(nbytes, nodes) if self.algorithm in ("", "ring") else None

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        inline_bytes = self.variant.get("inline_bytes", inline_bytes_requested(config)[0])
        executor = self.variant.get("executor", executors_requested(config)[0])
        algorithm = self.algorithm or "ring"
        if algorithm == AUTO:  # what no flag fixed, auto measures (ring.cpu.planning)
            inline_bytes = self.variant.get("inline_bytes")
            executor = self.variant.get("executor")
        return CpuSession(nodes, sync, config, world, algorithm, inline_bytes, executor)
