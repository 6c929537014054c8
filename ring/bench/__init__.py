"""The measurement harness: ``python -m ring.bench`` (console script ``ring-bench``).

Measures allreduce the way nccl-tests' ``all_reduce_perf`` does, for our ring and its
peers in one loop, next to the machine's memory ceilings measured in the same run, and
writes a tidy CSV with the environment in a JSON beside it.

* :mod:`ring.bench.cli`: flags and their checks (exit 2 on bad input), over
  :mod:`ring.bench.flags` (sizes, whole numbers, lists) and :mod:`ring.bench.sweep` (the
  size sweep every measuring subcommand shares);
* :mod:`ring.bench.backends`: the backend plugin interface and one module per backend;
* :mod:`ring.bench.runner`: the loop; :mod:`ring.bench.data`: inputs and validation;
* :mod:`ring.bench.ceilings`, :mod:`ring.bench.environment`, :mod:`ring.bench.results`;
* :mod:`ring.bench.merge`: several runs into one file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backends import Backend, HostSession, MpiSession, Session, register_backend

__all__ = ["Backend", "HostSession", "MpiSession", "Session", "register_backend"]


def __getattr__(name: str) -> Any:
    # Loaded on first use, so that ring.bench.flags (the size syntax the workflow's config
    # shares) imports without NumPy when Snakemake plans from an environment of its own.
    if name not in __all__:
        raise AttributeError(f"module 'ring.bench' has no attribute {name!r}")
    from . import backends

    value = getattr(backends, name)
    globals()[name] = value
    return value
