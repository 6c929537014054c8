"""``summary.md``: the profile tables in Markdown plus the figures derived from them.

Derived figures:

* collective calls per node count N, read off the step ranges alone: a call on N nodes
  emits ``<phase> step s node i`` for every s < N - 1 and i < N, so the count of
  ``step s node 0`` is the number of calls with N >= s + 2;
* step ranges (and so transfers) per call: N (N - 1) per phase, 2 N (N - 1) per
  allreduce (4 for N = 2, 24 for N = 4), against the peer-to-peer copies counted;
* wait share: the fraction of each step's time spent blocked in synchronisation
  primitives (from ``waits``, i.e. the trace, not the whole-run ``osrt`` totals).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..bench.results import write_text_atomic
from .markdown import pct, table
from .node_counts import calls_by_nodes
from .profile_section import ProfileRows, profile_section
from .tables import read_tables

__all__ = ["calls_by_nodes", "render_summary", "write_summary"]


def _across_profiles(profiles: list[str], tables: dict[str, list[dict]]) -> list[str]:
    """One line per profile: how N, transfers and waiting compare (e.g. 2gpu vs 4gpu)."""
    rows = []
    for profile in profiles:
        p = ProfileRows.of(profile, tables)
        calls, steps = p.calls_total, p.steps
        seen = p.nodes_seen()
        nodes = "?" if seen is None else ", ".join(str(n) for n in seen)
        step_ranges = sum(int(r["count"]) for r in steps)
        memops, kernels = p.tables["memops"], p.tables["kernels"]
        peer = sum(int(r["count"]) for r in memops if r["kind"] == "peer_to_peer")
        launches = sum(int(r["count"]) for r in kernels)
        total = sum(r["total_ns"] for r in steps)
        waited = [r["wait_ns"] for r in steps if r["wait_ns"] is not None]
        share = pct(sum(waited) / total) if waited and total else ""

        def per_call(count: int, has_data: bool = True, calls: int = calls) -> str:
            return f"{count / calls:.2f}" if calls and has_data else ""

        rows.append(
            [profile, nodes or "", calls, per_call(step_ranges, bool(steps)),
             per_call(peer, bool(memops)), per_call(launches, bool(kernels)), share]
        )  # fmt: skip
    return [
        "## Profiles side by side",
        "",
        *table(
            ["profile", "N", "calls", "step ranges per call", "peer-to-peer copies per call",
             "kernels per call", "wait share of steps"],
            rows,
        ),
    ]  # fmt: skip


def render_summary(tables: dict[str, list[dict]], title: str = "Nsight Systems profile") -> str:
    """The Markdown text of :func:`write_summary`."""
    profiles = sorted({row["profile"] for rows in tables.values() for row in rows})
    lines = [f"# {title}", ""]
    lines += [
        "Times in µs (the tables/*.csv files keep nanoseconds), sizes in MB = 10^6 bytes.",
        "",
    ]
    if not profiles:
        lines += ["No report had data.", ""]
    if len(profiles) > 1:
        lines += _across_profiles(profiles, tables)
    for profile in profiles:
        lines += profile_section(profile, tables)
    return "\n".join(lines).rstrip() + "\n"


def write_summary(
    tables_dir: str | os.PathLike, out_md: str | os.PathLike, title: str | None = None
) -> Path:
    """Read the tables in ``tables_dir`` and write ``out_md``."""
    tables = read_tables(tables_dir)
    out = Path(out_md)
    write_text_atomic(out, render_summary(tables, title or "Nsight Systems profile"))
    return out
