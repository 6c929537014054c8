"""The algorithms of each ring backend side by side: which rows the report's tables keep,
which run each per-algorithm panel shows, and the fastest algorithm at each size.

The workflow measures every algorithm of a backend in one run per N (``algorithms_n*.csv``,
config key ``algorithms``) beside the ring-only sweeps; runs that measured the plain ring
only are drawn and tabled as such instead of implying that the other algorithms lost.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pandas as pd

from ..schedule import ALGORITHMS
from .analysis import PLAIN, RING_BACKENDS, buffers_of, executor_of
from .drawing import bytes_axis, grid, legend_right, line_with_band, log_y, save, seaborn_pyplot
from .fmt import format_bytes, format_number, format_ratio
from .table import Table

__all__ = [
    "ONLY_RING",
    "Panel",
    "draw",
    "fastest_per_size",
    "fastest_table",
    "headline_rows",
    "panels",
]

ONLY_RING = "only the ring was measured in this run"
# The rows of one panel come from one run, one sync mode and one dtype/op.
_CHOICE = ["machine", "run", "sync", "dtype", "op"]
# How a line's rows ran, where it is not the default (node threads, host buffers): a cpu
# algorithm by slices, an MPI one on shared buffers (ring.mpi.shared).  Each is a line of
# its own, in its algorithm's colour, dashed (dotted) with its strip hatched.
_DASHES = {"": "-", "slices": "--", "shared": ":"}
_HATCHES = {"slices": "///", "shared": "..."}


def _ran(rows: pd.DataFrame) -> pd.Series:
    """Each row's way of running that makes a line of its own (the CSV's executor and
    buffers columns): "slices", "shared", or "" for the defaults."""
    ran = pd.Series("", index=rows.index).where(executor_of(rows) != "slices", "slices")
    return ran.where(buffers_of(rows) != "shared", "shared")


def _series(rows: pd.DataFrame) -> pd.Series:
    """Each row's line name: its algorithm, and the way it ran in parentheses where that
    is not the default ("ring (slices)")."""
    ran = rows["ran"]
    return rows["algorithm"].where(ran == "", rows["algorithm"] + " (" + ran + ")")


def headline_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows the report's tables and other figures compare: the plain ring of each ring
    backend and every peer, as before algorithms were measured.

    Other algorithms are this module's alone; so are the plain ring and the peers of a run
    that measured other algorithms too (an algorithm sweep), wherever another run measured
    that series at the same backend, sync, N, dtype and op (else a second line of one
    series).
    """
    ring = rows["backend"].isin(RING_BACKENDS)
    other = ring & (rows["algorithm"] != PLAIN)
    kept = rows[~other]
    runs = [c for c in ("run", "machine") if c in rows]
    mixed_runs = pd.MultiIndex.from_frame(rows.loc[other, runs])
    mixed = pd.MultiIndex.from_frame(kept[runs]).isin(mixed_runs)
    key = [c for c in ("backend", "sync", "nodes", "dtype", "op", "machine") if c in rows]
    # The ring by slices (measured in the algorithm sweep only) is its own series.
    points = pd.MultiIndex.from_frame(
        kept[key].assign(executor=executor_of(kept), buffers=buffers_of(kept))
    )
    elsewhere = points[~mixed]
    return kept[~(mixed & points.isin(elsewhere))]


def _order(algorithm: str, ran: str = "") -> tuple[int, bool, str]:
    """The library's order of algorithms, each on the node threads (host buffers) before
    by slices (shared buffers)."""
    known = ALGORITHMS.index(algorithm) if algorithm in ALGORITHMS else len(ALGORITHMS)
    return (known, ran != "", f"{algorithm} {ran}")


@dataclass(frozen=True)
class Panel:
    """One backend at one N: every algorithm (on each executor) one run measured there;
    ``rows["series"]`` names the line, from the row's ``algorithm`` and ``ran``."""

    backend: str
    nodes: int
    run: str
    machine: str  # "" for this machine
    sync: str
    rows: pd.DataFrame  # series, algorithm, ran, bytes, time_us, time_us_p25, time_us_p75
    threads_per_core: float | None  # above 1: more workers than cores
    crowded: tuple[str, ...] = ()  # the executors whose rows ran above one per core

    @property
    def algorithms(self) -> list[str]:
        """The lines measured (an algorithm, and how it ran where that is not the default),
        in the library's order (others, e.g. peers, after)."""
        lines = self.rows[["series", "algorithm", "ran"]].drop_duplicates()
        return [
            r.series for r in sorted(lines.itertuples(), key=lambda r: _order(r.algorithm, r.ran))
        ]

    def ran(self, series: str) -> str:
        """How the rows of line ``series`` ran ("" for the defaults)."""
        return str(self.rows.loc[self.rows["series"] == series, "ran"].iloc[0])

    @property
    def only_ring(self) -> bool:
        return self.algorithms == [PLAIN]

    @property
    def title(self) -> str:
        where = f" @ {self.machine}" if self.machine else ""
        over = self.threads_per_core
        crowded = ""
        if over and over > 1:
            # Where the slices kept to the cores while the node threads did not, say whose.
            whose = f" ({', '.join(self.crowded)})" if self.crowded and self.mixed else ""
            crowded = f", {format_number(over)} per core{whose}: oversubscribed"
        return f"{self.backend}, N = {self.nodes}{where}{crowded}"

    @property
    def mixed(self) -> bool:
        """Whether the panel holds lines of both executors."""
        return len(set(self.rows["ran"] == "slices")) > 1


def panels(rows: pd.DataFrame, backend: str) -> list[Panel]:
    """One panel per N of ``backend``: the run (and sync, dtype, op) that measured the most
    algorithms there, this machine's before a reference's, so its times compare in one run."""
    mine = rows[(rows["backend"] == backend) & (rows["bytes"] > 0)].copy()
    mine["ran"] = _ran(mine)
    mine["series"] = _series(mine)
    if "machine" not in mine:
        mine["machine"] = ""
    mine["machine"] = mine["machine"].fillna("").astype(str)
    found = []
    for nodes, at_n in mine.groupby("nodes", sort=True):
        counts = at_n.groupby(_CHOICE, sort=False)["series"].nunique()
        # Most algorithms first; then this machine's, pairwise sync, and names in order.
        best = min(counts.index, key=lambda k: (-counts[k], k[0] != "", k[2] != "pairwise", k))
        chosen = at_n[(at_n[_CHOICE] == pd.Series(best, index=_CHOICE)).all(axis=1)]
        over, crowded = _crowding(chosen)
        columns = ["series", "algorithm", "ran", "bytes", "time_us", "time_us_p25", "time_us_p75"]
        found.append(
            Panel(backend, int(nodes), best[1], best[0], best[2], chosen[columns], over, crowded)
        )
    return found


def _crowding(rows: pd.DataFrame) -> tuple[float | None, tuple[str, ...]]:
    """The most workers per core of any row (each row counts the threads it ran on), and
    the executors with rows above one per core."""
    if "threads_per_core" not in rows:
        return None, ()
    per_core = pd.to_numeric(rows["threads_per_core"], errors="coerce")
    over = per_core.max()
    if pd.isna(over):
        return None, ()
    crowded = executor_of(rows)[per_core > 1]
    return float(over), tuple(e for e in ("nodes", "slices") if e in set(crowded))


def fastest_per_size(panel_rows: pd.DataFrame) -> pd.DataFrame:
    """Per size: the fastest algorithm (lowest median time), its time, the next fastest and
    how much slower it is (its time / the fastest's; NaN where one algorithm was measured)."""
    records = []
    for size, at_size in panel_rows.groupby("bytes", sort=True):
        ranked = at_size.sort_values(["time_us", "series"])
        first = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else None
        records.append(
            {
                "bytes": int(size),
                "fastest": first["series"],
                "time_us": float(first["time_us"]),
                "next": "" if second is None else second["series"],
                "margin": float("nan") if second is None else second["time_us"] / first["time_us"],
            }
        )
    return pd.DataFrame.from_records(
        records, columns=["bytes", "fastest", "time_us", "next", "margin"]
    )


def _ranges(fastest: pd.DataFrame) -> list[list[str]]:
    """Consecutive sizes with the same fastest algorithm, one row each."""
    rows = []
    for name, group in itertools.groupby(fastest.itertuples(), key=lambda r: r.fastest):
        run = list(group)
        low, high = run[0].bytes, run[-1].bytes
        sizes = format_bytes(low) if low == high else f"{format_bytes(low)} – {format_bytes(high)}"
        margins = [r.margin for r in run if not pd.isna(r.margin)]
        margin = (
            f"{format_ratio(min(margins))} – {format_ratio(max(margins))}"
            if len(margins) > 1
            else (format_ratio(margins[0]) if margins else "")
        )
        rows.append([sizes, name, margin])
    return rows


def fastest_table(model) -> Table | None:
    """The fastest algorithm per size range, backend and N; None without ring results."""
    body = []
    for backend in RING_BACKENDS:
        for panel in panels(model.algorithm_rows, backend):
            # A reference's run is already named after its machine (<machine>/<file>).
            where = panel.run
            head = [backend, str(panel.nodes)]
            if panel.only_ring:
                body.append([*head, "all", f"ring ({ONLY_RING})", "", where])
                continue
            for sizes, name, margin in _ranges(fastest_per_size(panel.rows)):
                body.append([*head, sizes, name, margin, where])
    if not body:
        return None
    return Table(
        "Fastest algorithm per size",
        ["backend", "N", "sizes", "fastest", "next fastest / fastest (time)", "run"],
        body,
        "Lowest median time per allreduce among the algorithms one run measured at that N "
        "(all in one run, so drift between runs does not decide); the next fastest's time "
        "over the fastest's, lowest to highest over the sizes. A cpu algorithm run by "
        'slices (executor="slices") is a contender of its own, named with (slices). Where '
        "a run measured only the ring, the other algorithms are not measured, not slower.",
    )


def draw(model, out_dir, backend: str):
    """``algorithms_<backend>``: time against size per algorithm, one panel per N, the
    fastest at each size ringed and named by the strip along the panel's foot; a cpu
    algorithm run by slices dashed (its strip hatched) in its algorithm's colour, an MPI one
    on shared buffers dotted."""
    found = panels(model.algorithm_rows, backend)
    if not found:
        return f"no {backend} ring results"
    plt, sns = seaborn_pyplot()
    # One colour per algorithm; its run by slices (on shared buffers) dashed (dotted) in it.
    lines = pd.concat([p.rows[["series", "algorithm"]] for p in found]).drop_duplicates()
    names = sorted(set(lines["algorithm"]), key=_order)
    colours = dict(zip(names, sns.color_palette("tab10", max(len(names), 1)), strict=False))
    palette = {line.series: colours[line.algorithm] for line in lines.itertuples()}
    fig, axes = grid(plt, 1, len(found))
    sizes = pd.concat([p.rows["bytes"] for p in found])
    for ax, panel in zip(axes[0], found, strict=True):
        for name in panel.algorithms:
            data = panel.rows[panel.rows["series"] == name]
            style = {"linestyle": _DASHES[panel.ran(name)]}
            line_with_band(
                ax, data, "time_us", "time_us_p25", "time_us_p75", palette[name], name, style
            )
        if panel.only_ring:
            ax.text(0.5, 0.92, ONLY_RING, transform=ax.transAxes, ha="center", fontsize=8)
        else:
            _mark_fastest(ax, panel, palette)
        bytes_axis(ax, sizes)
        log_y(ax)
        ax.set_title(panel.title, fontsize=9)
        ax.set_ylabel("time per allreduce (µs, median)")
    legend_right(fig, axes.flat)
    return save(fig, plt, out_dir, f"algorithms_{backend}")


def _mark_fastest(ax, panel: Panel, palette: dict) -> None:
    """A black ring on the fastest point of each size, and a strip in its colour."""
    fastest = fastest_per_size(panel.rows)
    ax.scatter(
        fastest["bytes"],
        fastest["time_us"],
        s=70,
        facecolors="none",
        edgecolors="black",
        linewidths=1.2,
        zorder=5,
        label="fastest at this size",
    )
    sizes = fastest["bytes"].tolist()
    # Each size owns the span halfway (on the log axis) to its neighbours.
    edges = [
        sizes[0] / 1.41,
        *((a * b) ** 0.5 for a, b in itertools.pairwise(sizes)),
        sizes[-1] * 1.41,
    ]
    for (low, high), name in zip(itertools.pairwise(edges), fastest["fastest"], strict=True):
        # A run by slices (on shared buffers) hatched, as its line is dashed (dotted).
        hatch = _HATCHES.get(panel.ran(name))
        ax.axvspan(low, high, ymin=0, ymax=0.035, facecolor=palette[name], hatch=hatch, linewidth=0)
