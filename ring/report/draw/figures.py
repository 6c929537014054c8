"""The report's figures, one question each (:mod:`.specs`), PNG for the report and SVG
beside it, from this build's results alone.

Every panel has a title; every legend has at most :data:`~.drawing.MAX_SERIES` entries; an
implementation keeps one colour in every figure (:mod:`.palette`); points the findings set
aside are drawn hollow or crossed.  A figure whose data is absent is not drawn:
:func:`draw_figures` returns it with the reason.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..derive.ceilings import LLC_MULTIPLE, llc_bytes, memory_ceiling
from ..derive.original import published
from ..derive.profiles import PHASES
from ..derive.series import name
from ..words.cost_model import cost_model_of, measured_group
from ..words.fmt import format_bytes
from .drawing import MAX_SERIES, bytes_axis, grid, log_y, save, seaborn_pyplot
from .palette import palette
from .specs import FIGURES, SPECS, Figure

__all__ = ["FIGURES", "draw_figures"]


def _plain(rows: pd.DataFrame) -> pd.DataFrame:
    """The plain ring by a thread per node on host buffers, and every peer."""
    ring = (rows["algorithm"] == "ring") & rows["executor"].isin(["", "nodes"])
    host = rows["buffers"].isin(["", "host"])
    return rows[(ring | rows["peer"]) & host & (rows["bytes"] > 0)]


def _names(rows: pd.DataFrame) -> pd.Series:
    return pd.Series([name(r) for r in rows.to_dict("records")], index=rows.index)


def _panel_title(kind: str, nodes: int, rows: pd.DataFrame) -> str:
    over = rows["per_core"].max() if "per_core" in rows and not rows.empty else 0
    title = f"{kind}, N = {nodes}"
    if over > 1:
        title += f" (up to {over:g} workers per core)"
    if "shared_devices" in rows and rows["shared_devices"].any():
        title += " (all nodes on one GPU)"
    return title


def _lines(ax, rows: pd.DataFrame, y: str, colours: dict, band: tuple[str, str] | None = None):
    """One line per series from the run that measured it at the most sizes, and its points
    of other runs (the original study's size) as markers of the same colour."""
    for series, part in sorted(rows.groupby("name"), key=lambda item: item[0])[:MAX_SERIES]:
        main = part.groupby("run")["bytes"].nunique().idxmax()
        line = part[part["run"] == main].sort_values("bytes")
        colour = colours[series]
        # A series with more workers than cores is drawn hollow: the findings set it aside.
        crowded = "per_core" in line and bool((line["per_core"] > 1).any())
        hollow = {"markerfacecolor": "white", "markersize": 4} if crowded else {"markersize": 3}
        label = f"{series} (oversubscribed)" if crowded else series
        ax.plot(line["bytes"], line[y], marker="o", color=colour, label=label, **hollow)
        if band is not None:
            ax.fill_between(
                line["bytes"], line[band[0]], line[band[1]], color=colour, alpha=0.2, linewidth=0
            )
        other = part[(part["run"] != main) & ~part["bytes"].isin(line["bytes"])]
        if not other.empty:
            ax.plot(other["bytes"], other[y], linestyle="none", marker="D", color=colour)


def _kind_panels(model) -> list[tuple[str, int, pd.DataFrame]]:
    rows = model.rows
    if rows.empty:
        return []
    rows = _plain(rows)
    rows = rows.assign(name=_names(rows))
    return [
        (kind, int(nodes), part)
        for (kind, nodes), part in rows.groupby(["kind", "nodes"], sort=True)
    ]


def _size_figure(model, out_dir: Path, figure: str, y: str, ylabel: str, band=None, marks=None):
    panels = _kind_panels(model)
    if not panels:
        return "no run of this build"
    plt, _ = seaborn_pyplot()
    colours = palette(set(pd.concat([p for *_, p in panels])["name"]))
    kinds = sorted({k for k, _, _ in panels})
    nodes = sorted({n for _, n, _ in panels})
    fig, axes = grid(plt, len(kinds), len(nodes), sharey=False)
    for ax in axes.flat:
        ax.set_visible(False)
    for kind, n, part in panels:
        ax = axes[kinds.index(kind)][nodes.index(n)]
        ax.set_visible(True)
        _lines(ax, part, y, colours, band)
        if marks is not None:
            marks(ax, kind, n)
        bytes_axis(ax, part["bytes"])
        log_y(ax)
        ax.set_ylabel(ylabel)
        ax.set_title(_panel_title(kind, n, part))
        ax.legend(fontsize="small", loc="best")
    return save(fig, plt, out_dir, figure)


def _time_vs_size(model, out_dir: Path):
    return _size_figure(
        model,
        out_dir,
        "time_vs_size",
        "time_us",
        "time per allreduce (µs)",
        band=("time_us_p25", "time_us_p75"),
    )


def _busbw(model, out_dir: Path):
    papers = [p for p in published() if p.busbw]

    def marks(ax, kind: str, nodes: int):
        if kind != "cpu":
            return
        for paper in papers:
            if paper.nodes != nodes:
                continue
            ax.plot(
                [paper.bytes],
                [paper.busbw],
                marker="*",
                markersize=11,
                linestyle="none",
                color="black" if paper.backend == "cpu" else "0.5",
                label=f"original, {paper.backend.upper()} ring (published)",
            )

    return _size_figure(model, out_dir, "busbw", "busbw_GBps", "bus bandwidth (GB/s)", marks=marks)


def _traffic(model, out_dir: Path):
    rows = model.rows
    if rows.empty or "traffic_GBps" not in rows:
        return "no run of this build"
    rows = _plain(rows)
    rows = rows[rows["traffic_GBps"].notna() & (rows["kind"] == "cpu")]
    if rows.empty:
        return "no cpu series of this build recorded its memory traffic"
    rows = rows.assign(name=_names(rows))
    runs = {run.name: run for run in model.inputs.runs}
    plt, _ = seaborn_pyplot()
    colours = palette(set(rows["name"]))
    nodes = sorted(set(rows["nodes"]))
    fig, axes = grid(plt, 1, len(nodes), sharey=True)
    for ax, n in zip(axes[0], nodes, strict=True):
        part = rows[rows["nodes"] == n]
        main = part.groupby("run")["bytes"].nunique().idxmax()
        part = part[part["run"] == main]
        _lines(ax, part, "traffic_GBps", colours)
        ceiling = memory_ceiling(runs[main], "add")
        if ceiling is not None:
            ax.axhspan(
                ceiling[0] * 0.995,
                ceiling[1] * 1.005,
                color="0.5",
                alpha=0.35,
                label=f"add ceiling, start–end of {main}",
            )
        llc = llc_bytes(runs[main])
        if llc:
            ax.axvline(LLC_MULTIPLE * llc, color="0.3", linestyle=":", linewidth=1)
        bytes_axis(ax, part["bytes"])
        log_y(ax)
        ax.set_ylabel("memory traffic (GB/s)")
        ax.set_title(_panel_title("cpu", n, part))
        ax.legend(fontsize="small", loc="lower right")
    return save(fig, plt, out_dir, "traffic_vs_ceiling")


def _sync(model, out_dir: Path):
    rows = model.rows
    if rows.empty:
        return "no run of this build"
    rows = rows[(rows["backend"] == "cpu") & (rows["algorithm"] == "ring") & (rows["bytes"] > 0)]
    pairs = []
    for (run, n), part in rows.groupby(["run", "nodes"]):
        syncs = {s: p.set_index("bytes") for s, p in part.groupby("sync")}
        if {"barrier", "pairwise"} <= set(syncs):
            pairs.append((run, int(n), syncs["barrier"], syncs["pairwise"]))
    if not pairs:
        return "no run of this build measured the cpu ring with both sync modes"
    plt, _ = seaborn_pyplot()
    fig, axes = grid(plt, 1, len(pairs), sharey=True)
    for ax, (run, n, barrier, pairwise) in zip(axes[0], pairs, strict=True):
        sizes = barrier.index.intersection(pairwise.index).sort_values()
        ratio = barrier.loc[sizes, "time_us"] / pairwise.loc[sizes, "time_us"]
        low = barrier.loc[sizes, "time_us_p25"] / pairwise.loc[sizes, "time_us_p75"]
        high = barrier.loc[sizes, "time_us_p75"] / pairwise.loc[sizes, "time_us_p25"]
        ax.plot(sizes, ratio, marker="o", markersize=3, color="C0", label="barrier / pairwise")
        ax.fill_between(sizes, low, high, color="C0", alpha=0.2, linewidth=0)
        ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1)
        bytes_axis(ax, sizes)
        ax.set_ylabel("time with a barrier / time pairwise")
        ax.set_title(f"cpu ring, N = {n} ({run})")
        ax.legend(fontsize="small")
    return save(fig, plt, out_dir, "sync_barrier_vs_pairwise")


def _scaling(model, out_dir: Path):
    rows = model.rows
    if rows.empty:
        return "no run of this build"
    rows = _plain(rows)
    rows = rows.assign(name=_names(rows))
    panels = []
    for kind, part in rows.groupby("kind"):
        lines = {}
        for series, mine in part.groupby("name"):
            by_n = {}
            for n, at in mine.groupby("nodes"):
                main = at.groupby("run")["bytes"].nunique().idxmax()
                by_n[int(n)] = at[at["run"] == main].set_index("bytes")["time_us"]
            if {2, 4} <= set(by_n):
                ratio = (by_n[4] / by_n[2]).dropna()
                if not ratio.empty:
                    lines[series] = ratio
        if lines:
            panels.append((kind, lines))
    if not panels:
        return "no implementation of this build was measured at both N = 2 and N = 4"
    plt, _ = seaborn_pyplot()
    colours = palette({s for _, lines in panels for s in lines})
    fig, axes = grid(plt, 1, len(panels), sharey=True)
    for ax, (kind, lines) in zip(axes[0], panels, strict=True):
        for series, ratio in sorted(lines.items())[:MAX_SERIES]:
            ax.plot(
                ratio.index, ratio, marker="o", markersize=3, color=colours[series], label=series
            )
        ax.axhline(3.0, color="0.3", linestyle=":", linewidth=1)
        bytes_axis(ax, [b for r in lines.values() for b in r.index])
        ax.set_ylabel("time at N = 4 / time at N = 2")
        ax.set_title(f"{kind}: N = 2 → 4")
        ax.legend(fontsize="small")
    return save(fig, plt, out_dir, "scaling_nodes")


def _findings(model, out_dir: Path):
    confirmations = model.confirmations
    if not confirmations:
        return "no confirmation launch set was given"
    plt, _ = seaborn_pyplot()
    fig, axes = grid(plt, 1, len(confirmations), sharey=False, sharex=False)
    for ax, c in zip(axes[0], confirmations, strict=True):
        for point in c.points:
            x = point.bytes
            kept = [r for k, r in point.launch_ratios.items() if k not in point.outliers]
            aside = [r for k, r in point.launch_ratios.items() if k in point.outliers]
            ax.plot(
                [x] * len(kept),
                kept,
                linestyle="none",
                marker="o",
                markersize=3,
                color="0.45",
                label="one launch",
            )
            if aside:
                ax.plot(
                    [x] * len(aside),
                    aside,
                    linestyle="none",
                    marker="x",
                    color="C3",
                    label="a launch set aside",
                )
            if point.ratio is None:
                ax.plot(
                    [x],
                    [float(np.median(kept or aside))],
                    marker="o",
                    markersize=8,
                    markerfacecolor="none",
                    color="C3",
                    linestyle="none",
                    label="size set aside",
                )
                continue
            r = point.ratio
            colour = {"ours": "C2", "peer": "C3", "tie": "C0"}[r.verdict]
            ax.errorbar(
                [x],
                [r.point],
                yerr=[[r.point - r.low], [r.high - r.point]],
                marker="s",
                markersize=6,
                color=colour,
                capsize=3,
                label={
                    "ours": "median: ours faster",
                    "peer": "median: peer faster",
                    "tie": "median: no clear difference",
                }[r.verdict],
            )
        ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1)
        bytes_axis(ax, [p.bytes for p in c.points])
        log_y(ax)
        ax.set_ylabel("time(fastest peer) / time(ours)")
        ax.set_title(f"{c.kind}, N = {c.nodes}: {c.launches} launches")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize="small")
    return save(fig, plt, out_dir, "findings")


def _screens(model, out_dir: Path):
    screens = model.screens
    if not screens:
        return "no run of this build measured several series of ours"
    plt, _ = seaborn_pyplot()
    from matplotlib.colors import LogNorm

    places = sorted(
        {(str(r.rows.iloc[0]["backend"]), int(r.rows.iloc[0]["nodes"])) for r in screens}
    )
    kinds = sorted({k for k, _ in places})
    nodes = sorted({n for _, n in places})
    fig, axes = grid(plt, len(kinds), len(nodes), sharey=False, sharex=False)
    for ax in axes.flat:
        ax.set_visible(False)
    image = None
    for run in screens:
        first = run.rows.iloc[0]
        ax = axes[kinds.index(str(first["backend"]))][nodes.index(int(first["nodes"]))]
        ax.set_visible(True)
        rows = run.rows[run.rows["bytes"] > 0]
        rows = rows.assign(name=_names(rows))
        table = rows.pivot_table(index="name", columns="bytes", values="time_us", aggfunc="min")
        relative = table / table.min(axis=0)
        ours = {name(r) for r in rows.to_dict("records") if r["algorithm"] != r["backend"]}
        order = sorted(relative.index, key=lambda s: (s not in ours, s))
        relative = relative.loc[order]
        image = ax.imshow(
            relative.to_numpy(), aspect="auto", cmap="viridis_r", norm=LogNorm(vmin=1, vmax=4)
        )
        picks = relative.loc[[s for s in order if s in ours]].idxmin(axis=0)
        for col, series in enumerate(picks):
            row = order.index(series)
            ax.add_patch(
                plt.Rectangle(
                    (col - 0.5, row - 0.5), 1, 1, fill=False, linewidth=1.5, edgecolor="k"
                )
            )
        ax.set_yticks(range(len(order)), order, fontsize="x-small")
        ax.set_xticks(
            range(len(relative.columns)),
            [format_bytes(int(b)) for b in relative.columns],
            rotation=60,
            fontsize="x-small",
        )
        within = model.rows[model.rows["run"] == run.name]
        title = _panel_title(str(first["backend"]), int(first["nodes"]), within)
        ax.set_title(f"{title}\n{run.name}, one launch", fontsize="small")
        ax.grid(False)
    if image is not None:
        bar = fig.colorbar(image, ax=list(axes.flat), shrink=0.6, extend="max")
        bar.set_label("time / fastest at that size (4 and above: one colour)")
    return save(fig, plt, out_dir, "screens")


def _profile_steps(model, out_dir: Path):
    steps = model.profile_steps
    if steps is None or steps.empty:
        return "no Nsight Systems profile with ring-step ranges was given"
    plt, sns = seaborn_pyplot()
    waits = model.profile_waits
    has_wait = waits is not None and not waits.empty
    profiles = sorted(steps["profile"].unique())
    fig, axes = grid(plt, 1, len(profiles) + (1 if has_wait else 0), sharey=False, sharex=False)
    for ax, profile in zip(axes[0], profiles, strict=False):
        data = steps[steps["profile"] == profile]
        sns.barplot(
            data=data, x="step", y="median_us", hue="phase", ax=ax, palette="Set2", errorbar=None
        )
        ax.set_title(f"profile {profile}: time per step")
        ax.set_xlabel("step")
        ax.set_ylabel("time per step (µs, median over nodes)")
    if has_wait:
        ax = axes[0][-1]
        sns.barplot(
            data=waits,
            x="profile",
            y="wait_share",
            hue="phase",
            ax=ax,
            palette="Set2",
            hue_order=[p for p in PHASES if p in set(waits["phase"])],
        )
        ax.set_ylim(0, 1)
        ax.set_ylabel("share of step time blocked in sync calls")
        ax.set_xlabel("profile")
        ax.set_title("waiting inside steps")
    return save(fig, plt, out_dir, "profile_steps")


def _cost_model(model, out_dir: Path):
    section = cost_model_of(model)
    panels = []
    for fit, path in section.fits:
        group = measured_group(fit, path)
        if group is None:
            continue
        points = [p for p in group.points if p.nodes == 2]
        algorithms = sorted({p.algorithm for p in points})
        halves = [
            algorithms[: (len(algorithms) + 1) // 2],
            algorithms[(len(algorithms) + 1) // 2 :],
        ]
        for half in halves:
            if half:
                panels.append((fit, [p for p in points if p.algorithm in half], half))
    if not panels:
        return "no fit of this build's screens (with its measured points at hand) was given"
    plt, _ = seaborn_pyplot()
    colours = palette({a for _, _, half in panels for a in half})
    cols = 2
    fig, axes = grid(plt, math.ceil(len(panels) / cols), cols, sharey=True, sharex=False)
    for ax in axes.flat:
        ax.set_visible(False)
    for ax, (fit, points, half) in zip(axes.flat, panels, strict=False):
        ax.set_visible(True)
        for algorithm in half:
            mine = sorted((p for p in points if p.algorithm == algorithm), key=lambda p: p.nbytes)
            ratio = [fit.predict(algorithm, 2, p.nbytes) / p.seconds for p in mine]
            ax.plot(
                [p.nbytes for p in mine],
                ratio,
                marker="o",
                markersize=3,
                color=colours[algorithm],
                label=algorithm,
            )
        ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1)
        bytes_axis(ax, [p.nbytes for p in points])
        log_y(ax)
        how = [f"{k}={fit.key[k]}" for k in ("executor", "buffers") if k in fit.key]
        ax.set_title(f"{fit.key.get('backend')} {' '.join(how) or '(as auto prices it)'}, N = 2")
        ax.set_ylabel("predicted / measured")
        ax.legend(fontsize="small")
    return save(fig, plt, out_dir, "cost_model")


_DRAW = {
    "findings": _findings,
    "screens": _screens,
    "time_vs_size": _time_vs_size,
    "busbw": _busbw,
    "traffic_vs_ceiling": _traffic,
    "sync_barrier_vs_pairwise": _sync,
    "scaling_nodes": _scaling,
    "profile_steps": _profile_steps,
    "cost_model": _cost_model,
}


def draw_figures(model, out_dir: str | Path) -> list[Figure]:
    """Every figure of :data:`FIGURES` drawn into ``out_dir``, or the reason it is not."""
    out_dir = Path(out_dir)
    figures = []
    for spec in FIGURES:
        drawn = _DRAW[spec.name](model, out_dir)
        if isinstance(drawn, str):
            figures.append(Figure(spec, missing=drawn))
        else:
            figures.append(Figure(SPECS[spec.name], png=drawn[0], svg=drawn[1]))
    return figures
