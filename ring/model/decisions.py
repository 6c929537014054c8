"""Decision tables for ``algorithm="auto"``, written from fits.

The library's :mod:`ring.auto` reads a table and never imports the model: this module is
where the model's picks become that data.  Per fit (one per backend, the richest where a
file holds several): the algorithms it measured that have each collective, and for every
tabulated N and power-of-two size the candidates of :func:`ring.model.table.ranked` (the
pick of :func:`~ring.model.table.fastest`, the model corrected by what the fit's sweeps
measured, first), inline and on the worker threads on the cpu backend.  Each run of sizes
with the same candidates is one ``[log2 of its first size, [algorithm, ...]]``.

The committed tables (``ring/decisions/<machine>.json``) are written from the committed
default fits (``ring/model/defaults/<machine>/model_fit.json``) by
``python -m ring.model decisions --defaults``; a test writes them again and compares.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..auto import DECISIONS, SCHEMA
from ..bench.results import write_text_atomic
from ..mpi.agree import GATHERED_BYTES, PREFLIGHT_ALGORITHMS, rides_preflight
from ..schedule import ALGORITHM_COLLECTIVES, COLLECTIVES
from .auto import richest
from .costs import ModelInputError
from .fit import Fit, Host
from .table import load_fits, ranked

__all__ = ["TABLE_LOG2_SIZES", "TABLE_NODES", "decisions", "write_decisions", "write_defaults"]

TABLE_NODES = (*range(2, 17), 32, 64)
TABLE_LOG2_SIZES = tuple(range(0, 31))  # 1 B .. 1 GiB
# The inline column: the model prices an inline call move by move, which at large N and
# sizes costs minutes to tabulate; larger calls are decided by the threads column.
INLINE_NODES, INLINE_LOG2_MAX = 8, 24
# A call far above the threshold runs inline or threaded whatever the fit's own threshold.
_INLINE, _THREADS = Host(inline_bytes=1 << 62), Host(inline_bytes=0)


def _runs(fit: Fit, names: list[str], nodes: int, host: Host, top: int = 30) -> list[list]:
    runs: list[list] = []
    for log2 in (k for k in TABLE_LOG2_SIZES if k <= top):
        order = ranked(fit, names, nodes, 1 << log2, host)
        if not runs or runs[-1][1] != order:
            runs.append([log2, order])
    return runs


def _columns(fit: Fit, names: list[str], nodes: int, cpu: bool) -> dict:
    """Per column (``threads``; on the cpu backend ``inline`` too, up to
    :data:`INLINE_NODES` and 2 ** :data:`INLINE_LOG2_MAX` bytes) the runs of picks."""
    if not cpu:
        return {"threads": _runs(fit, names, nodes, Host())}
    columns = {"threads": _runs(fit, names, nodes, _THREADS)}
    if nodes <= INLINE_NODES:
        columns["inline"] = _runs(fit, names, nodes, _INLINE, INLINE_LOG2_MAX)
    return columns


def _table(fit: Fit) -> dict:
    backend = fit.key.get("backend", "")
    candidates = {
        c: [a for a in fit.algorithms if c in ALGORITHM_COLLECTIVES.get(a, ())] for c in COLLECTIVES
    }
    picks = {
        c: {str(n): _columns(fit, names, n, backend == "cpu") for n in TABLE_NODES}
        for c, names in candidates.items()
        if names
    }
    table: dict[str, Any] = {"machine": fit.key.get("machine", ""), "backend": backend}
    table["fit"] = fit.key
    table |= {"nodes": list(TABLE_NODES), "candidates": candidates, "picks": picks}
    if backend == "cpu":
        table["inline_log2_max"] = INLINE_LOG2_MAX
    if backend == "mpi":
        riding = [a for a in PREFLIGHT_ALGORITHMS if rides_preflight("allreduce", a)]
        table["preflight"] = [GATHERED_BYTES, riding]
    return table


def decisions(fits: list[Fit]) -> dict:
    """The decision document of ``fits``: one table per backend, from its richest fit."""
    backends = sorted({f.key.get("backend", "") for f in fits})
    tables = [_table(richest([f for f in fits if f.key.get("backend") == b])) for b in backends]
    return {"schema": SCHEMA, "made_by": "python -m ring.model decisions", "tables": tables}


def write_decisions(fit_path: str | Path, out: str | Path) -> Path:
    """The decision table of the fits in ``fit_path``, written to ``out``."""
    fits = load_fits(fit_path)
    out = Path(out)
    try:
        write_text_atomic(out, json.dumps(decisions(fits), separators=(",", ":")) + "\n")
    except OSError as exc:
        raise ModelInputError(f"{out}: cannot write the decision table ({exc})") from None
    return out


def write_defaults(defaults: Path, into: Path = DECISIONS) -> list[Path]:
    """A table per committed default fit (``defaults/<machine>/model_fit.json``), written
    as ``into/<machine>.json``."""
    into.mkdir(parents=True, exist_ok=True)
    return [
        write_decisions(path, into / f"{path.parent.name}.json")
        for path in sorted(defaults.glob("*/model_fit.json"))
    ]
