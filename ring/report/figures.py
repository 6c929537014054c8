"""The report's figures: one question each, PNG for the report and SVG beside it.

A figure whose data is absent is not drawn: :func:`draw_figures` returns it with the reason,
and the report lists it under "not measured".  Matplotlib runs on the Agg backend and seaborn
is imported only when a figure is drawn, so ``import ring.report`` stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd

from . import algorithms
from .analysis import DEVICE_BACKENDS, busbw_factor
from .cost_model import cost_model_of
from .cost_model_figure import draw_cost_model
from .drawing import (
    DASHES,
    MAX_SERIES,
    bytes_axis,
    ceiling_styles,
    draw_ceilings,
    grid,
    legend_right,
    line_with_band,
    log_y,
    save,
    seaborn_pyplot,
    size_line,
)
from .figure_specs import FIGURES, SPECS, Figure, FigureSpec
from .fmt import format_bytes, format_ratio
from .profiles import PHASES

__all__ = ["FIGURES", "SPECS", "Figure", "FigureSpec", "draw_figures"]


# --- panels of at most MAX_SERIES series ------------------------------------------------

# Each backend's panel holds its peers: the question a panel answers is one backend's.
FAMILY = {
    "cpu": "cpu",
    "numpy-direct": "cpu",
    "seed-cpp": "cpu",
    "mpi": "mpi",
    "mpi-allreduce": "mpi",
    "gpu": "gpu",
    "nccl": "gpu",
}


def panel_groups(rows: pd.DataFrame, column: str = "series") -> list[tuple[str, pd.DataFrame]]:
    """Rows split into panels: one machine and one backend with its peers each (never two
    machines in a panel), at most :data:`MAX_SERIES` values of ``column`` per panel."""
    machine = rows["machine"].fillna("").astype(str) if "machine" in rows else ""
    family = rows["backend"].map(FAMILY).fillna(rows["backend"])
    groups = []
    keyed = rows.assign(_machine=machine, _family=family)
    for (where, kind), part in keyed.groupby(["_machine", "_family"], sort=True):
        names = sorted(part[column].unique())
        chunks = [names[i : i + MAX_SERIES] for i in range(0, len(names), MAX_SERIES)]
        for k, chunk in enumerate(chunks):
            title = kind + (f" @ {where}" if where else "")
            if len(chunks) > 1:
                title += f" ({k + 1}/{len(chunks)})"
            groups.append((title, part[part[column].isin(chunk)]))
    return groups


# --- the figures ------------------------------------------------------------------------


def _time_vs_size(model, out_dir: Path):
    rows = model.plot_rows
    if rows.empty:
        return "no sweep rows with a size above 0"
    plt, sns = seaborn_pyplot()
    palette = model.palette(sns)
    counts = sorted(rows["nodes"].unique())
    groups = panel_groups(rows)
    fig, axes = grid(plt, len(groups), len(counts))
    for row, (title, group) in enumerate(groups):
        for ax, nodes in zip(axes[row], counts, strict=True):
            for series, data in group[group["nodes"] == nodes].groupby("series", sort=True):
                line_with_band(
                    ax, data, "time_us", "time_us_p25", "time_us_p75", palette[series], series, {}
                )
            bytes_axis(ax, rows["bytes"])
            log_y(ax)
            ax.set_title(f"{title}, N = {nodes}")
            ax.set_ylabel("time per allreduce (µs, median)")
    legend_right(fig, axes.flat)
    return save(fig, plt, out_dir, "time_vs_size")


def _bandwidth_vs_size(model, out_dir: Path):
    rows = model.plot_rows
    bandwidth = rows[(rows["busbw_GBps"] > 0) | (rows["traffic_GBps"] > 0)]
    if bandwidth.empty:
        return "no sweep rows with a bandwidth above 0 (N = 1 only?)"
    plt, sns = seaborn_pyplot()
    palette = model.palette(sns)
    ceilings = model.ceilings
    styles = ceiling_styles(ceilings)
    counts = sorted(bandwidth["nodes"].unique())
    groups = panel_groups(bandwidth)
    metrics = (
        ("busbw_GBps", "busbw (GB/s)", True),
        ("traffic_GBps", "memory traffic (GB/s)", False),
    )
    fig, axes = grid(plt, 2 * len(groups), len(counts))
    for g, (title, group) in enumerate(groups):
        for m, (metric, ylabel, link) in enumerate(metrics):
            for ax, nodes in zip(axes[2 * g + m], counts, strict=True):
                data = group[(group["nodes"] == nodes) & (group[metric] > 0)]
                for series, part in data.groupby("series", sort=True):
                    size_line(ax, part, metric, palette[series], series)
                # Only the ceilings of the hardware the panel's series ran on.
                shown = set(zip(data["run"], data["backend"].isin(DEVICE_BACKENDS), strict=True))
                relevant = [
                    (run, device) in shown
                    for run, device in zip(ceilings["run"], ceilings["device"], strict=True)
                ]
                relevant = pd.Series(relevant, index=ceilings.index, dtype=bool)
                draw_ceilings(ax, ceilings[relevant & (ceilings["link"] == link)], styles)
                bytes_axis(ax, bandwidth["bytes"])
                log_y(ax)
                ax.set_ylabel(ylabel)
                ax.set_title(f"{title}, N = {nodes}")
    legend_right(fig, axes.flat)
    return save(fig, plt, out_dir, "bandwidth_vs_size")


def _ring_vs_peers(model, out_dir: Path):
    table = model.regime_points
    if table.empty:
        return "no ring backend and peer were measured in one run at the same N and size"
    plt, sns = seaborn_pyplot()
    panels = list(table.groupby(["machine", "backend", "nodes"], sort=True))
    cols = min(len(panels), 3)
    rows_n = -(-len(panels) // cols)
    fig, axes = grid(plt, rows_n, cols, sharey=True)
    # A colour per backend; a run's line is labelled in its panel (the title where it is
    # the panel's only one), so no legend far from the lines.
    backends = sorted(set(table["backend"]))
    colours = dict(zip(backends, sns.color_palette("tab10", len(backends)), strict=True))
    for ax, ((machine, backend, nodes), part) in zip(axes.flat, panels, strict=False):
        runs = list(part.groupby("run", sort=True))
        for k, (run, line) in enumerate(runs):
            style = DASHES[k % len(DASHES)]
            line_with_band(ax, line, "ratio", "low", "high", colours[backend], f"run {run}", style)
            aside = line[line["gate"] != ""]
            ax.plot(aside["bytes"], aside["ratio"], "x", color="0.2", markersize=7)
        ax.axhline(1.0, color="0.3", linewidth=0.8)
        bytes_axis(ax, table["bytes"])
        log_y(ax)
        on = f" @ {machine}" if machine else ""
        title = f"{backend}{on}, N = {nodes}"
        if len(runs) == 1:
            title += f" (run {runs[0][0]})"
        else:
            ax.legend(fontsize=8, frameon=False)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("fastest peer time / our fastest time")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    return save(fig, plt, out_dir, "ring_vs_peers")


def _gpu_vs_cpu(model, out_dir: Path):
    comparison = model.comparison("gpu_vs_cpu")
    if comparison is None:
        missing = [b for b in ("gpu", "cpu") if b not in model.backends]
        return f"no {' or '.join(missing)} ring results"
    return _speedup_figure(
        comparison.table[comparison.table["bytes"] > 0],
        ["fast", "nodes_fast", "slow", "nodes_slow"],
        lambda fast, n_fast, slow, n_slow: f"{fast} N={n_fast} over {slow} N={n_slow}",
        "speedup (CPU time / GPU time)",
        out_dir / "gpu_vs_cpu_speedup",
        mark_best=True,
    )


def _speedup_figure(table, keys, label, ylabel, out: Path, mark_best=False):
    """A speedup line (with its band) per group of ``keys``, at most MAX_SERIES per panel;
    ``mark_best`` stars each group's maximum and writes out the overall one."""
    plt, sns = seaborn_pyplot()
    groups = list(table.groupby(keys, sort=True))
    chunks = [groups[i : i + MAX_SERIES] for i in range(0, max(len(groups), 1), MAX_SERIES)]
    fig, axes = grid(plt, 1, len(chunks))
    colours = sns.color_palette("tab10", MAX_SERIES)
    top = table.loc[table["speedup"].idxmax()] if mark_best and not table.empty else None
    for ax, chunk in zip(axes[0], chunks, strict=True):
        for colour, (key, pair) in zip(colours, chunk, strict=False):
            line_with_band(ax, pair, "speedup", "low", "high", colour, label(*key), {})
            if mark_best:
                best = pair.loc[pair["speedup"].idxmax()]
                ax.plot(best["bytes"], best["speedup"], marker="*", markersize=12, color=colour)
                if top is not None and best.name == top.name:
                    # Only the overall maximum is written out; the stars mark each pair's own.
                    ax.annotate(
                        f"max {format_ratio(top['speedup'])} at {format_bytes(int(top['bytes']))}",
                        (top["bytes"], top["speedup"]),
                        textcoords="offset points",
                        xytext=(0, 10),
                        ha="center",
                        fontsize=9,
                        fontweight="bold",
                    )
        ax.axhline(1.0, color="0.3", linewidth=0.8)
        bytes_axis(ax, table["bytes"])
        log_y(ax)
        ax.set_ylabel(ylabel)
    legend_right(fig, axes.flat)
    return save(fig, plt, out.parent, out.name)


def _scaling(model, out_dir: Path):
    table = model.scaling
    if table.empty:
        counts = sorted(model.rows["nodes"].unique())
        return f"no series measured at two node counts above 1 (node counts found: {counts})"
    plt, sns = seaborn_pyplot()
    palette = model.palette(sns)
    about = model.rows.drop_duplicates("series").set_index("series")
    table = table.assign(
        backend=table["series"].map(about["backend"]),
        machine=table["series"].map(about["machine"]) if "machine" in about else "",
    )
    groups = panel_groups(table)
    fig, axes = grid(plt, len(groups), 2, sharey=False)
    pairs = sorted(set(zip(table["nodes_a"], table["nodes_b"], strict=True)))
    for row, (title, group) in enumerate(groups):
        for (series, n_a, n_b), part in group.groupby(["series", "nodes_a", "nodes_b"]):
            dash = DASHES[pairs.index((n_a, n_b)) % len(DASHES)]
            label = f"{series} (N={n_b} / N={n_a})"
            for ax, column in zip(axes[row], ("time_ratio", "busbw_ratio"), strict=True):
                size_line(ax, part, column, palette[series], label, dash)
        for n_a, n_b in pairs:
            reference = busbw_factor(n_b) / busbw_factor(n_a)
            axes[row][0].axhline(
                reference,
                color="0.3",
                linestyle=":",
                linewidth=1,
                label=f"busbw factor ratio N={n_b} / N={n_a}",
            )
        axes[row][1].axhline(1.0, color="0.3", linewidth=0.8)
        axes[row][0].set_ylabel("time at larger N / time at smaller N")
        axes[row][1].set_ylabel("busbw at larger N / busbw at smaller N")
        for ax in axes[row]:
            bytes_axis(ax, table["bytes"])
            log_y(ax)
            ax.set_title(title)
    legend_right(fig, axes.flat)
    return save(fig, plt, out_dir, "scaling_nodes")


def _profile_steps(model, out_dir: Path):
    steps = model.profile_steps
    if steps is None or steps.empty:
        return model.profile_steps_missing
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
        ax.set_title(profile)
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


def _sync(model, out_dir: Path):
    comparison = model.comparison("pairwise_vs_barrier")
    if comparison is None:
        syncs = sorted(set(model.rows.loc[model.rows["backend"] == "cpu", "sync"]))
        return f"the cpu ring was not measured with both sync modes (found: {syncs or 'none'})"
    return _speedup_figure(
        comparison.table[comparison.table["bytes"] > 0],
        ["fast", "slow", "nodes_fast"],
        lambda fast, slow, nodes: f"N = {nodes}: {fast} over {slow}",
        "speedup (barrier time / pairwise time)",
        out_dir / "sync_barrier_vs_pairwise",
    )


def _kernel_bandwidth(model, out_dir: Path):
    if not model.inputs.kernel_bandwidth:
        return "no kernel-bandwidth result given"
    plt, sns = seaborn_pyplot()
    fig, axes = grid(plt, 1, 1)
    ax = axes[0][0]
    sizes = []
    lines = []
    for result in model.inputs.kernel_bandwidth:
        rows = result.rows[result.rows["bytes"] > 0]
        sizes += rows["bytes"].tolist()
        devices = rows.groupby("device") if "device" in rows else [(None, rows)]
        for device, part in devices:
            where = result.name if device is None else f"{result.name}, device {device}"
            # Sweeps before the kernel column measured CuPy's ufunc only.
            kernels = part.groupby("kernel") if "kernel" in part else [("ufunc", part)]
            for kernel, rows_of in kernels:
                lines.append((f"kernel {kernel} [{where}]", "kernel_GBps", rows_of))
            # The copy is measured once per size, whichever kernels ran beside it.
            copies = part.drop_duplicates("bytes")
            lines.append((f"copy [{where}]", "copy_GBps", copies))
    colours = sns.color_palette("tab10", max(len(lines), 1))
    for colour, (label, column, part) in zip(colours, lines, strict=False):
        size_line(ax, part[part[column].notna()], column, colour, label)
    draw_ceilings(ax, model.kernel_ceilings, ceiling_styles(model.kernel_ceilings))
    bytes_axis(ax, sizes)
    log_y(ax)
    ax.set_ylabel("GB/s")
    legend_right(fig, [ax])
    return save(fig, plt, out_dir, "kernel_bandwidth")


def _cost_model(model, out_dir: Path) -> str | tuple[Path, Path]:
    figure = draw_cost_model(cost_model_of(model), out_dir)
    if figure.png is None or figure.svg is None:
        return figure.missing or "not drawn"
    return figure.png, figure.svg


_DRAW: dict[str, Callable] = {
    "time_vs_size": _time_vs_size,
    **{
        f"algorithms_{backend}": partial(algorithms.draw, backend=backend)
        for backend in ("cpu", "mpi", "gpu")
    },
    "bandwidth_vs_size": _bandwidth_vs_size,
    "ring_vs_peers": _ring_vs_peers,
    "gpu_vs_cpu_speedup": _gpu_vs_cpu,
    "scaling_nodes": _scaling,
    "profile_steps": _profile_steps,
    "sync_barrier_vs_pairwise": _sync,
    "kernel_bandwidth": _kernel_bandwidth,
    "cost_model": _cost_model,
}


def draw_figures(model, out_dir: str | Path) -> list[Figure]:
    """Draw every figure the data allows into ``out_dir``; stale files of absent ones go.

    Returns one :class:`Figure` per entry of :data:`FIGURES`, drawn or with its reason.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    figures = []
    for spec in FIGURES:
        result = _DRAW[spec.name](model, out_dir)
        if isinstance(result, str):
            # A figure from an earlier run must not pass for one of this run.
            for suffix in (".png", ".svg"):
                (out_dir / f"{spec.name}{suffix}").unlink(missing_ok=True)
            figures.append(Figure(spec, missing=result))
        else:
            png, svg = result
            figures.append(Figure(spec, png=png, svg=svg))
    return figures
