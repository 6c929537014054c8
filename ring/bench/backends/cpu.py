"""Backend ``cpu``: our algorithms on one persistent thread per node
(:class:`ring.CpuCommunicator`), and calls of at most ``--inline-bytes`` per node on the
calling thread.  A row says which ran: ``inline`` (1: the calling thread), and its
``threads_per_core`` and ``pinned`` are those of the threads that did the work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...cpu import INLINE_BYTES, SYNC_MODES, CpuCommunicator
from ..algorithms import library_algorithms
from ..ceilings import copy_traffic_bytes
from ..flags import BenchInputError, parse_size, split_list
from ..placement import add_pin_argument, pin_native_threads, pin_requested
from .base import Backend, HostSession, Session, register_backend

if TYPE_CHECKING:
    from ..cli import BenchConfig

__all__ = ["CpuBackend", "CpuSession", "inline_bytes_requested", "ring_traffic_bytes"]


def inline_bytes_requested(config: BenchConfig) -> tuple[int, ...]:
    """``--inline-bytes`` (the cpu backend's flag): sizes, each measured as its own series."""
    text = str(getattr(config, "inline_bytes", "") or INLINE_BYTES)
    try:
        return tuple(parse_size(item) for item in split_list(text, "--inline-bytes"))
    except BenchInputError as exc:
        raise BenchInputError(f"--inline-bytes: {exc}") from None


class CpuSession(HostSession):
    def __init__(
        self,
        nodes: int,
        sync: str,
        config: BenchConfig,
        world,
        algorithm: str = "ring",
        inline_bytes: int | None = None,
    ):
        super().__init__(nodes, sync, config, world)
        self.communicator = CpuCommunicator(
            nodes, sync=sync, algorithm=algorithm, inline_bytes=inline_bytes
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
        # calling thread, which no --pin holds; the other rows ran on the N workers.
        nbytes = self.buffers[0].nbytes if self.buffers else 0
        self.inline = self.nodes > 1 and 0 < nbytes <= self.communicator.inline_bytes
        self.workers = 1 if self.inline else self.nodes
        self.pinned = self.threads_pinned and not self.inline

    def row_extras(self) -> dict[str, Any]:
        inline = {"inline_bytes": self.communicator.inline_bytes, "inline": int(self.inline)}
        return {**super().row_extras(), **inline}

    def collective(self) -> None:
        self.communicator.allreduce(self.buffers, self.op)

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

    def variants(self, config: BenchConfig) -> tuple[dict[str, Any], ...]:
        if not getattr(config, "inline_bytes", ""):
            return ({},)  # the default: series keep their plain names
        return tuple({"inline_bytes": value} for value in inline_bytes_requested(config))

    def traffic_bytes(self, nbytes: int, nodes: int) -> int | None:
        # The formula is the plain ring's; the other algorithms' traffic is not modelled.
        return ring_traffic_bytes(nbytes, nodes) if self.algorithm in ("", "ring") else None

    def open(self, nodes: int, sync: str, config: BenchConfig, world) -> Session:
        inline_bytes = self.variant.get("inline_bytes", inline_bytes_requested(config)[0])
        return CpuSession(nodes, sync, config, world, self.algorithm or "ring", inline_bytes)
