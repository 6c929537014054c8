"""CUDA graphs for the GPU ring: capture a whole collective once, then replay it.

At small sizes the GPU ring is bound by the host: every step of every node is a few CUDA
calls from Python, each far longer than the device work it launches.  A CUDA graph records
those calls once and replays them with one launch.  What a graph bakes in is exactly what
the key of :class:`GraphCache` holds: the buffers' and scratch chunks' addresses, the
element count, dtype, op and the collective (the communicator fixes N and the devices).
Different buffers, a grown scratch chunk or another size make another key, captured anew;
the cache keeps the most recent :data:`MAX_GRAPHS`.

A key is captured the *second* time it is seen: the first call runs eagerly, so every
kernel is compiled and loaded and every scratch chunk allocated before a capture starts
(module loading and allocation inside a capture are not allowed everywhere).

Capture runs on node 0's stream; the other nodes' streams join it through an event
recorded there (fork) and node 0's stream waits for each of their last steps (join), as
CUDA requires of a multi-stream capture.  Dependencies on the caller's work stay outside
the graph: the communicator makes node 0's stream wait for them before it launches.
A capture that fails (a driver without multi-device capture, a library call that is not
capturable) is ended, reported in one warning, and the communicator runs every later call
eagerly: nothing executes during a capture, so the buffers are untouched and the eager run
gives the result.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_GRAPHS", "GraphCache"]

MAX_GRAPHS = 64


class GraphCache:
    """Graphs by key; :meth:`lookup` says whether to replay, capture or run eagerly."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.broken: str | None = None  # why capture failed, once it has
        self._graphs: OrderedDict = OrderedDict()
        self._seen: set = set()
        self.captures = 0
        self.replays = 0

    def __len__(self) -> int:
        return len(self._graphs)

    def clear(self) -> None:
        self._graphs.clear()
        self._seen.clear()

    def lookup(self, key) -> tuple[str, Any]:
        """``("replay", graph)``, ``("capture", None)`` or ``("eager", None)``."""
        if not self.enabled or self.broken is not None:
            return "eager", None
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            self.replays += 1
            return "replay", graph
        if key in self._seen:
            return "capture", None
        self._seen.add(key)
        if len(self._seen) > 4 * MAX_GRAPHS:
            self._seen = {key}
        return "eager", None

    def capture(self, key, stream, body: Callable[[], None]):
        """Capture ``body()`` on ``stream``; the graph, or None after a failure (warned).

        CUDA and CuPy report capture errors as RuntimeError (CUDARuntimeError is one); a
        CuPy without capture lacks the methods.  Anything else is a bug and propagates.
        """
        try:
            stream.begin_capture()
        except (RuntimeError, AttributeError) as exc:
            return self._failed(exc)
        try:
            body()
        except (RuntimeError, AttributeError) as exc:
            with contextlib.suppress(RuntimeError, AttributeError):
                stream.end_capture()  # an invalidated capture must still be ended
            return self._failed(exc)
        except BaseException:
            # A bug or an interrupt: leave no stream capturing, then let it propagate.
            with contextlib.suppress(RuntimeError, AttributeError):
                stream.end_capture()
            raise
        try:
            graph = stream.end_capture()
        except (RuntimeError, AttributeError) as exc:
            return self._failed(exc)
        self._graphs[key] = graph
        if len(self._graphs) > MAX_GRAPHS:
            self._graphs.popitem(last=False)
        self.captures += 1
        return graph

    def _failed(self, exc: BaseException) -> None:
        self.broken = f"{type(exc).__name__}: {exc}"
        self.clear()
        warnings.warn(
            f"CUDA graph capture of the GPU ring failed ({self.broken}); every later call "
            "of this communicator runs eagerly (graphs=False avoids the attempt)",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
