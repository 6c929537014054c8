"""What a :class:`ring.gpu.GpuCommunicator` holds on its devices between calls: peer
access, streams, events and scratch, made once and grown when a call needs more.

Every node has one stream from the start; a call that spreads its moves over more streams
(:mod:`ring.gpu.hazards`) adds them, and the events its schedule records, the first time
it runs.  Scratch is kept per node, role, stream and dtype: the ``landing`` area each
stream receives into across a link, and the ``algorithm``'s own for plans that use one.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import numpy as np

from .devices import enable_peer_access

__all__ = ["DeviceResources"]


class DeviceResources:
    """Mixin of :class:`ring.gpu.GpuCommunicator`: its streams, events and scratch."""

    cp: Any
    runtime: Any
    devices: tuple[int, ...]
    nodes: int
    _scratch: list[dict]
    _done: Any

    def _enable_peer_access(self) -> tuple[dict, tuple]:
        runtime = self.runtime
        distinct = sorted(set(self.devices))
        access: dict[tuple[int, int], bool] = {}
        missing = []
        for a in distinct:
            for b in distinct:
                if a == b:
                    continue
                ok = bool(runtime.deviceCanAccessPeer(a, b))
                if ok:
                    with self.cp.cuda.Device(a):
                        enable_peer_access(runtime, b)
                else:
                    missing.append((a, b))
                access[(a, b)] = ok
        if missing:
            pairs = ", ".join(f"{a}->{b}" for a, b in missing)
            warnings.warn(
                f"no peer access between CUDA devices {pairs}: cudaMemcpyPeerAsync stages "
                "those copies through host memory, so they are slower",
                RuntimeWarning,
                stacklevel=4,
            )
        return access, tuple(missing)

    def _make_streams_and_events(self) -> None:
        cupy, n = self.cp, self.nodes
        self.stream_rows: list[list] = [[] for _ in range(n)]
        self.step_events: list[list] = [[] for _ in range(n)]
        self.move_events: list[list] = [[] for _ in range(n)]
        self._grow_streams(1)
        self._grow_events(max(2 * (n - 1), 1))
        # Per device, the events that mark the caller's streams there as ready: one per
        # stream a call is ordered on (grown by _ready_event).
        self._ready: dict[int, list] = {d: [] for d in sorted(set(self.devices))}
        # Scratch replaced while a call that did not block may still use it (_scratch_for).
        self._retired: list = []
        with cupy.cuda.Device(self.devices[0]):
            # Only these two carry timestamps: from "every input is ready" to "every node
            # has finished", on node 0's device.
            self.entry_event = cupy.cuda.Event()
            self._done = cupy.cuda.Event()
            # Forks the other streams off node 0's first inside a graph capture.
            self._fork = cupy.cuda.Event(disable_timing=True)

    @property
    def first_streams(self) -> list:
        """Every node's first stream (the one a single-stream call runs on)."""
        return [row[0] for row in self.stream_rows]

    def _grow_streams(self, count: int) -> None:
        """``count`` streams per node at least."""
        for node, row in enumerate(self.stream_rows):
            if len(row) < count:
                with self.cp.cuda.Device(self.devices[node]):
                    # Non-blocking: the legacy default stream must not serialise the nodes;
                    # the dependency on the caller's work is made explicit in _prologue.
                    row.extend(
                        self.cp.cuda.Stream(non_blocking=True) for _ in range(count - len(row))
                    )

    def _grow_events(self, steps: int) -> None:
        """An event per node per step of the longest single-stream plan run so far."""
        self._grow(self.step_events, [steps] * self.nodes)

    def _grow_move_events(self, counts: tuple[int, ...]) -> None:
        """``counts[node]`` events for node ``node``'s moves of a multi-stream schedule."""
        self._grow(self.move_events, counts)

    def _grow(self, table: list[list], counts) -> None:
        for node, (events, count) in enumerate(zip(table, counts, strict=True)):
            if len(events) < count:
                with self.cp.cuda.Device(self.devices[node]):
                    events.extend(
                        self.cp.cuda.Event(disable_timing=True) for _ in range(count - len(events))
                    )

    def _ready_event(self, device: int, index: int):
        """The ``index``-th ready event of ``device``, made the first time it is needed.
        Reused by every call: a stream's wait takes the event's record of its own call."""
        events = self._ready[device]
        while len(events) <= index:
            with self.cp.cuda.Device(device):
                events.append(self.cp.cuda.Event(disable_timing=True))
        return events[index]

    def _scratch_for(
        self, node: int, dtype: np.dtype, elements: int, role: str = "landing", stream: int = 0
    ):
        """Node ``node``'s scratch (``landing`` for ranges its stream ``stream`` receives
        across a link, ``algorithm`` for the plan's own), grown when a call needs more.
        Only called before any work of the call is queued; an earlier call that did not
        block may still use the scratch replaced, so it is kept (``_retired``) until the
        done event of the calls before has completed."""
        cache = self._scratch[node]
        key = (role, stream, dtype)
        scratch = cache.get(key)
        if scratch is None or scratch.size < elements:
            if scratch is not None:
                if self._retired and self._done.done:  # every earlier call has finished
                    self._retired.clear()
                self._retired.append(scratch)
            with self.cp.cuda.Device(self.devices[node]):
                scratch = cache[key] = self.cp.empty(elements, dtype=dtype)
        return scratch

    def _drain(self) -> None:
        """The host waits for everything queued on the communicator's streams (any error
        a stream reports is left for the caller's next CUDA call to meet)."""
        for row in self.stream_rows:
            for stream in row:
                with contextlib.suppress(Exception):
                    stream.synchronize()
        self._retired.clear()

    def _release(self) -> None:
        """Drop the streams, events and scratch, once no queued work can use them."""
        self._drain()
        self.stream_rows = []
        self.step_events = []
        self.move_events = []
        self._scratch = []
        self._ready = {}
