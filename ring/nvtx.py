"""NVTX ranges in domain ``ring``, cheap enough for the hot path.

Names the backends emit (and :mod:`ring.nsys` reads back):

* one outer range per collective call: ``allreduce``, ``reduce_scatter`` or ``all_gather``;
* one range per step of each phase per node: ``reduce_scatter step 2 node 1``
  (MPI adds the rank: ``... node 1 rank 1``); an algorithm other than the ring puts its
  name first: ``rabenseifner all_gather step 0 node 3``, ``recursive-doubling exchange
  step 1 node 0`` (phases: :data:`ring.schedule.steps.PHASES`).

In an ``nsys stats`` report they appear as ``ring:<name>``.  The ``nvtx`` package is
optional; without it every range is a no-op.  ``nvtx`` must be ``>=0.2.10,<0.2.12`` for
Nsight Systems 2022.4 to record ranges (see docs/api.md, "NVTX ranges").

Ranges are pushed only when a tool can take them: NVTX hands its calls to the library named
by ``NVTX_INJECTION64_PATH`` (``nsys profile`` sets it for the processes it launches)
and, without one, every call returns at once.  The Python around each call does
not, and beside a bound small call it is a good share of the call.  So
without that variable every range here is a no-op, decided at import; ``RING_NVTX=1``
pushes them anyway (a tool that injects itself some other way), ``NVTX_DISABLE`` never.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from .schedule import plan

DOMAIN = "ring"
COLLECTIVES = ("allreduce", "reduce_scatter", "all_gather")
STEP_RANGE = re.compile(
    r"^(?:(?P<algorithm>[a-z]+(?:-[a-z]+)*) )?"
    r"(?P<phase>fold|reduce|gather|reduce_scatter|exchange|all_gather|scatter|broadcast|unfold)"
    r" step (?P<step>\d+) node (?P<node>\d+)"
    r"(?: rank (?P<rank>\d+))?$"
)

# Set by nsys for the processes it profiles: where NVTX's calls go.
INJECTION_ENV = ("NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH")
FORCE_ENV = "RING_NVTX"


def tool_attached(environ=os.environ) -> bool:
    """Whether an NVTX tool can take this process's ranges (or ``RING_NVTX=1`` says so)."""
    if environ.get(FORCE_ENV, "") not in ("", "0"):
        return True
    return any(environ.get(name) for name in INJECTION_ENV)


try:  # pragma: no cover - exercised by which packages are installed
    # nvtx disables itself under NVTX_DISABLE; AVAILABLE says so too.
    if os.environ.get("NVTX_DISABLE"):
        raise ImportError("NVTX_DISABLE is set")
    if not tool_attached():
        raise ImportError("no NVTX tool is attached")
    import nvtx as _nvtx

    def _make(message: str):
        # An nvtx.annotate keeps its event attributes, so entering it again is one Python
        # call around the C call: about 1.8x the cost of nvtx's private entry points, where
        # nvtx.push_range looks its domain and attributes up on every call, about 10x
        # (scripts/nvtx_cost.py). nvtx 0.2.11 has no cheaper public way.
        return _nvtx.annotate(message, domain=DOMAIN).__enter__

    # Leaving any annotation of the domain pops the domain's innermost range.
    pop = _nvtx.annotate(domain=DOMAIN).__exit__

    AVAILABLE = True
except ImportError:  # pragma: no cover
    AVAILABLE = False

    def _make(message: str):
        return _noop

    def pop() -> None:
        pass


def _noop() -> None:
    pass


def pusher(message: str):
    """A zero-argument callable that pushes the range ``message``; pair it with :func:`pop`.

    Build pushers once (per communicator) so the hot path does no string work.
    """
    return _make(message)


class annotate:
    """Context manager for a range outside the hot path; :func:`call_range` for the outer
    range of a collective call."""

    __slots__ = ("_push",)

    def __init__(self, message: str):
        self._push = _make(message)

    def __enter__(self):
        self._push()
        return self

    def __exit__(self, *exc) -> None:
        pop()


# One reusable context manager per collective, built on first use: building an annotation
# costs more than a bound small call's own operations (ring.host.moves).
_CALL_RANGES: dict[str, annotate] = {}


def call_range(name: str) -> annotate:
    """The outer range of collective ``name``, built once."""
    found = _CALL_RANGES.get(name)
    if found is None:
        found = _CALL_RANGES[name] = annotate(name)
    return found


# Per-step NVTX ranges are named for communicators up to this size.  A call makes
# 2N(N - 1) step ranges, more than a profile can show beyond this; above it only the call's
# outer range is recorded, and every node shares one table of no-op ranges, so the state
# stays linear in N.
STEP_RANGE_MAX_NODES = 64

Pushers = dict[str, tuple[Callable[[], Any], ...]]


def no_range() -> None:
    """Push and pop of a step above STEP_RANGE_MAX_NODES: records nothing."""


def node_pushers(nodes: int) -> list[Pushers]:
    """Per node and collective, the NVTX range pusher of each of the node's ring steps."""
    if nodes > STEP_RANGE_MAX_NODES:
        shared = {c: (no_range,) * plan(c, nodes, 0).steps for c in COLLECTIVES}
        return [shared] * nodes
    return [
        {c: tuple(pusher(s.name) for s in plan(c, nodes, 0).node_steps(node)) for c in COLLECTIVES}
        for node in range(nodes)
    ]
