"""The report's figures: one question each, PNG for the report and SVG beside it.

A figure whose data is absent is not drawn: :func:`draw_figures` returns it with the reason,
and the report lists it under "not measured".  Matplotlib runs on the Agg backend and seaborn
is imported only when a figure is drawn, so ``import ring.report`` stays cheap.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .analysis import DEVICE_BACKENDS, busbw_factor
from .fmt import format_bytes, format_ratio
from .profiles import PHASES

__all__ = ["FIGURES", "Figure", "FigureSpec", "draw_figures"]

_DPI = 110
_PANEL = (4.6, 3.4)


@dataclass(frozen=True)
class FigureSpec:
    """What a figure answers, and the caption every output of it carries."""

    name: str
    question: str
    caption: str


@dataclass(frozen=True)
class Figure:
    spec: FigureSpec
    png: Path | None = None
    svg: Path | None = None
    missing: str | None = None  # why it was not drawn

    @property
    def drawn(self) -> bool:
        return self.png is not None


FIGURES = (
    FigureSpec(
        "time_vs_size",
        "How long does one allreduce take at each buffer size?",
        "Median time per allreduce against the size of one node's buffer (log–log), one "
        "line per backend, one panel per node count N; the band spans the 25th to 75th "
        "percentile of the timed calls.",
    ),
    FigureSpec(
        "bandwidth_vs_size",
        "How close does each backend come to the machine's ceilings?",
        "Top: bus bandwidth (algbw · 2(N−1)/N, as nccl-tests) with link ceilings between "
        "devices where the run measured them. Bottom: memory traffic of the schedule per "
        "second with the copy and add ceilings measured in the same runs (a line, or a shaded "
        "band from the lowest to the highest value where runs, devices or pairs measured one "
        "ceiling differently).",
    ),
    FigureSpec(
        "ring_vs_peers",
        "Is our ring faster than what a user would pick instead, at the same N?",
        "Speedup of each ring backend over its peers at the same node count and size "
        "(peer time / ring time; above 1 the ring is faster). Peers are compared within the "
        "same run where the run measured them. The band combines both interquartile ranges.",
    ),
    FigureSpec(
        "gpu_vs_cpu_speedup",
        "How much faster is the GPU ring than the CPU ring, and at which size?",
        "Wall-clock speedup of the GPU ring over the CPU ring (CPU time / GPU time) against "
        "buffer size; the marker shows the largest speedup of each pair. Series at "
        "different N are compared by time, not bandwidth.",
    ),
    FigureSpec(
        "scaling_nodes",
        "What does going from N = 2 to N = 4 nodes cost?",
        "Left: time at the larger N over time at the smaller N; the dotted line is the ratio "
        "of the busbw factors 2(N−1)/N, where a ring limited by its links would sit. Right: "
        "busbw at the larger N over busbw at the smaller N (1 = busbw held).",
    ),
    FigureSpec(
        "profile_steps",
        "Where does a ring step spend its time, and how much of it is waiting?",
        "Per-step time by phase from the Nsight Systems NVTX ranges of each profile (median "
        "over nodes and calls), and the share of the profiled ring time spent blocked in "
        "synchronisation calls (OS runtime) where the profile recorded them.",
    ),
    FigureSpec(
        "sync_barrier_vs_pairwise",
        "Does pairwise synchronisation beat a barrier after every step on the CPU?",
        "Speedup of the CPU ring with pairwise synchronisation over the same ring with a "
        "barrier after every step (barrier time / pairwise time), per node count; the band "
        "combines both interquartile ranges.",
    ),
    FigureSpec(
        "kernel_bandwidth",
        "Does the GPU reduction kernel run at memory speed?",
        "Throughput of the single-GPU reduction kernel (two reads and one write per element) "
        "against buffer size, with the device-to-device copy ceiling of the same run. Not a "
        "ring measurement.",
    ),
)
SPECS = {spec.name: spec for spec in FIGURES}


def _seaborn():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.85)
    return plt, sns


def _bytes_axis(ax, sizes) -> None:
    """Log2 size axis labelled at powers of two, at most seven labels, in binary units."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log", base=2)
    sizes = [s for s in sizes if s > 0]
    if sizes:
        low = math.floor(math.log2(min(sizes)))
        high = math.ceil(math.log2(max(sizes)))
        step = 1
        while (high - low) // step + 1 > 7:
            step *= 2
        # Labels start at the smallest size, so with a sweep's step factor they fall on
        # measured sizes, and end at the largest: a reader sees where the sweep stops.
        majors = list(range(low, high + 1, step))
        majors[-1] = high  # at most one step from the label it replaces: no overlap
        ax.xaxis.set_major_locator(FixedLocator([2.0**k for k in majors]))
        ax.xaxis.set_minor_locator(FixedLocator([2.0**k for k in range(low, high + 1)]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _tick_bytes(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    spec = ax.get_subplotspec()
    ax.set_xlabel("buffer size per node (bytes)" if spec is None or spec.is_last_row() else "")


def _log_y(ax) -> None:
    """Log y axis with plain numbers (1, 2, 5 per decade), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,g}" if v > 0 else ""))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _tick_bytes(value: float) -> str:
    if value <= 0 or not math.isclose(value, round(value)):
        return ""
    return format_bytes(round(value))


def _denser_log_ticks(fig) -> None:
    """Label more values on log axes that span less than about a decade and a half."""
    from matplotlib.ticker import LogLocator

    for ax in fig.axes:
        if ax.get_yscale() != "log":
            continue
        low, high = ax.get_ylim()
        if low > 0 and math.log10(high / low) < 1.5:
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0)))


def _save(fig, plt, out_dir: Path, name: str) -> tuple[Path, Path]:
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    _denser_log_ticks(fig)
    # SVG text stays text (searchable), and no timestamp makes reruns byte-identical.
    fig.savefig(png, dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
        fig.savefig(svg, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return png, svg


def _legend_right(fig, axes) -> None:
    handles, labels = {}, []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in handles and not label.startswith("_"):
                handles[label] = handle
                labels.append(label)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if labels:
        fig.legend(
            [handles[label] for label in labels],
            labels,
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            frameon=False,
        )


def _grid(plt, rows: int, cols: int, *, sharey="row", sharex=True):
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(_PANEL[0] * cols, _PANEL[1] * rows),
        squeeze=False,
        sharex=sharex,
        sharey=sharey,
        layout="constrained",
    )
    return fig, axes


def _line_with_band(ax, data: pd.DataFrame, y: str, low: str, high: str, colour, label, style):
    data = data.sort_values("bytes")
    ax.plot(data["bytes"], data[y], color=colour, label=label, marker="o", markersize=3, **style)
    ax.fill_between(data["bytes"], data[low], data[high], color=colour, alpha=0.2, linewidth=0)


_DASHES = ({}, {"linestyle": "--"}, {"linestyle": ":"}, {"linestyle": "-."})


# --- the figures ------------------------------------------------------------------------


def _time_vs_size(model, out_dir: Path):
    rows = model.plot_rows
    if rows.empty:
        return "no sweep rows with a size above 0"
    plt, sns = _seaborn()
    palette = model.palette(sns)
    counts = sorted(rows["nodes"].unique())
    fig, axes = _grid(plt, 1, len(counts))
    for ax, nodes in zip(axes[0], counts, strict=True):
        for series, data in rows[rows["nodes"] == nodes].groupby("series", sort=True):
            _line_with_band(
                ax, data, "time_us", "time_us_p25", "time_us_p75", palette[series], series, {}
            )
        _bytes_axis(ax, rows["bytes"])
        _log_y(ax)
        ax.set_title(f"N = {nodes}")
        ax.set_ylabel("time per allreduce (µs, median)")
    _legend_right(fig, axes.flat)
    return _save(fig, plt, out_dir, "time_vs_size")


def _ceiling_families(ceilings: pd.DataFrame) -> pd.DataFrame:
    """Ceilings grouped by name without per-device/per-pair indices, over the given runs.

    One family is drawn as one line, or as a band from its lowest to its highest value where
    runs (or devices, or pairs) measured it differently.
    """
    measured = ceilings[ceilings["GBps"].notna() & (ceilings["GBps"] > 0)].copy()
    measured["family"] = measured["ceiling"].map(lambda c: re.sub(r"\[[^\]]*\]", "[*]", c))
    return (
        measured.groupby(["family", "device", "link"], sort=True)
        .agg(
            min=("GBps", "min"),
            max=("GBps", "max"),
            count=("GBps", "count"),
            runs=("run", lambda runs: ", ".join(sorted(set(runs)))),
        )
        .reset_index()
    )


def _ceiling_styles(ceilings: pd.DataFrame) -> dict[str, dict]:
    """One grey and dash per ceiling family, the same in every panel, unlike any series."""
    families = sorted(set(_ceiling_families(ceilings)["family"]))
    shades = ("0.1", "0.45", "0.7")
    return {
        family: {"color": shades[i % len(shades)], **_DASHES[1 + (i // len(shades)) % 3]}
        for i, family in enumerate(families)
    }


def _draw_ceilings(ax, ceilings: pd.DataFrame, styles: dict) -> None:
    for family in _ceiling_families(ceilings).itertuples():
        style = styles[family.family]
        # Named with the runs that measured it: a ceiling belongs to its run.
        label = f"ceiling {family.family} ({family.runs})"
        if family.max > family.min:
            ax.axhspan(family.min, family.max, color=style["color"], alpha=0.25, label=label)
        else:
            ax.axhline(family.max, linewidth=1.3, label=label, **style)


def _bandwidth_vs_size(model, out_dir: Path):
    rows = model.plot_rows
    bandwidth = rows[(rows["busbw_GBps"] > 0) | (rows["traffic_GBps"] > 0)]
    if bandwidth.empty:
        return "no sweep rows with a bandwidth above 0 (N = 1 only?)"
    plt, sns = _seaborn()
    palette = model.palette(sns)
    ceilings = model.ceilings
    styles = _ceiling_styles(ceilings)
    counts = sorted(bandwidth["nodes"].unique())
    fig, axes = _grid(plt, 2, len(counts))
    metrics = (
        ("busbw_GBps", "busbw (GB/s)", True),
        ("traffic_GBps", "memory traffic (GB/s)", False),
    )
    for row, (metric, ylabel, link) in enumerate(metrics):
        for ax, nodes in zip(axes[row], counts, strict=True):
            data = bandwidth[(bandwidth["nodes"] == nodes) & (bandwidth[metric] > 0)]
            for series, part in data.groupby("series", sort=True):
                part = part.sort_values("bytes")
                ax.plot(
                    part["bytes"],
                    part[metric],
                    color=palette[series],
                    label=series,
                    marker="o",
                    markersize=3,
                )
            # Only the ceilings of the hardware the panel's series ran on.
            shown = set(zip(data["run"], data["backend"].isin(DEVICE_BACKENDS), strict=True))
            relevant = [
                (run, device) in shown
                for run, device in zip(ceilings["run"], ceilings["device"], strict=True)
            ]
            relevant = pd.Series(relevant, index=ceilings.index, dtype=bool)
            _draw_ceilings(ax, ceilings[relevant & (ceilings["link"] == link)], styles)
            _bytes_axis(ax, bandwidth["bytes"])
            _log_y(ax)
            ax.set_ylabel(ylabel)
            ax.set_title(f"N = {nodes}")
    _legend_right(fig, axes.flat)
    return _save(fig, plt, out_dir, "bandwidth_vs_size")


def _ring_vs_peers(model, out_dir: Path):
    tables = [
        c.table.assign(ring=c.name.removesuffix("_vs_peers"))
        for c in model.comparisons
        if c.name.endswith("_vs_peers")
    ]
    if not tables:
        return "no ring backend and peer were measured at the same N and size"
    table = pd.concat(tables, ignore_index=True)
    table = table[table["bytes"] > 0]
    plt, sns = _seaborn()
    palette = model.palette(sns)
    rings = [r for r in ("cpu", "mpi", "gpu") if r in set(table["ring"])]
    counts = sorted(table["nodes_fast"].unique())
    fig, axes = _grid(plt, len(rings), len(counts), sharey=True)
    for row, ring in enumerate(rings):
        for ax, nodes in zip(axes[row], counts, strict=True):
            part = table[(table["ring"] == ring) & (table["nodes_fast"] == nodes)]
            fasts = sorted(part["fast"].unique())
            for (fast, slow), pair in part.groupby(["fast", "slow"], sort=True):
                dash = _DASHES[fasts.index(fast) % len(_DASHES)]
                label = f"{fast} over {slow}"
                _line_with_band(ax, pair, "speedup", "low", "high", palette[slow], label, dash)
            ax.axhline(1.0, color="0.3", linewidth=0.8)
            _bytes_axis(ax, table["bytes"])
            _log_y(ax)
            ax.set_title(f"{ring} ring, N = {nodes}")
            ax.set_ylabel("speedup (peer time / ring time)")
            if part.empty:
                ax.text(0.5, 0.5, "no peer at this N", transform=ax.transAxes, ha="center")
    _legend_right(fig, axes.flat)
    return _save(fig, plt, out_dir, "ring_vs_peers")


def _gpu_vs_cpu(model, out_dir: Path):
    comparison = model.comparison("gpu_vs_cpu")
    if comparison is None:
        missing = [b for b in ("gpu", "cpu") if b not in model.backends]
        return f"no {' or '.join(missing)} ring results"
    table = comparison.table[comparison.table["bytes"] > 0]
    plt, sns = _seaborn()
    fig, axes = _grid(plt, 1, 1)
    ax = axes[0][0]
    groups = list(table.groupby(["fast", "nodes_fast", "slow", "nodes_slow"], sort=True))
    colours = sns.color_palette("tab10", max(len(groups), 1))
    for colour, ((fast, n_fast, slow, n_slow), pair) in zip(colours, groups, strict=False):
        label = f"{fast} N={n_fast} over {slow} N={n_slow}"
        _line_with_band(ax, pair, "speedup", "low", "high", colour, label, {})
        best = pair.loc[pair["speedup"].idxmax()]
        ax.plot(best["bytes"], best["speedup"], marker="*", markersize=12, color=colour)
    # Only the overall maximum is written out; the stars mark each pair's own.
    top = table.loc[table["speedup"].idxmax()]
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
    _bytes_axis(ax, table["bytes"])
    _log_y(ax)
    ax.set_ylabel("speedup (CPU time / GPU time)")
    _legend_right(fig, [ax])
    return _save(fig, plt, out_dir, "gpu_vs_cpu_speedup")


def _scaling(model, out_dir: Path):
    table = model.scaling
    if table.empty:
        counts = sorted(model.rows["nodes"].unique())
        return f"no series measured at two node counts above 1 (node counts found: {counts})"
    plt, sns = _seaborn()
    palette = model.palette(sns)
    fig, axes = _grid(plt, 1, 2, sharey=False)
    pairs = sorted(set(zip(table["nodes_a"], table["nodes_b"], strict=True)))
    for (series, n_a, n_b), part in table.groupby(["series", "nodes_a", "nodes_b"], sort=True):
        part = part.sort_values("bytes")
        dash = _DASHES[pairs.index((n_a, n_b)) % len(_DASHES)]
        label = f"{series} (N={n_b} / N={n_a})"
        for ax, column in zip(axes[0], ("time_ratio", "busbw_ratio"), strict=True):
            ax.plot(
                part["bytes"],
                part[column],
                color=palette[series],
                label=label,
                marker="o",
                markersize=3,
                **dash,
            )
    for n_a, n_b in pairs:
        reference = busbw_factor(n_b) / busbw_factor(n_a)
        axes[0][0].axhline(
            reference,
            color="0.3",
            linestyle=":",
            linewidth=1,
            label=f"busbw factor ratio N={n_b} / N={n_a}",
        )
    axes[0][1].axhline(1.0, color="0.3", linewidth=0.8)
    axes[0][0].set_ylabel("time at larger N / time at smaller N")
    axes[0][1].set_ylabel("busbw at larger N / busbw at smaller N")
    for ax in axes[0]:
        _bytes_axis(ax, table["bytes"])
        _log_y(ax)
    _legend_right(fig, axes.flat)
    return _save(fig, plt, out_dir, "scaling_nodes")


def _profile_steps(model, out_dir: Path):
    steps = model.profile_steps
    if steps is None or steps.empty:
        return model.profile_steps_missing
    plt, sns = _seaborn()
    waits = model.profile_waits
    has_wait = waits is not None and not waits.empty
    profiles = sorted(steps["profile"].unique())
    fig, axes = _grid(plt, 1, len(profiles) + (1 if has_wait else 0), sharey=False, sharex=False)
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
    return _save(fig, plt, out_dir, "profile_steps")


def _sync(model, out_dir: Path):
    comparison = model.comparison("pairwise_vs_barrier")
    if comparison is None:
        syncs = sorted(set(model.rows.loc[model.rows["backend"] == "cpu", "sync"]))
        return f"the cpu ring was not measured with both sync modes (found: {syncs or 'none'})"
    table = comparison.table[comparison.table["bytes"] > 0]
    plt, sns = _seaborn()
    fig, axes = _grid(plt, 1, 1)
    ax = axes[0][0]
    groups = list(table.groupby(["fast", "slow", "nodes_fast"], sort=True))
    colours = sns.color_palette("tab10", max(len(groups), 1))
    for colour, ((fast, slow, nodes), pair) in zip(colours, groups, strict=False):
        _line_with_band(
            ax, pair, "speedup", "low", "high", colour, f"N = {nodes}: {fast} over {slow}", {}
        )
    ax.axhline(1.0, color="0.3", linewidth=0.8)
    _bytes_axis(ax, table["bytes"])
    _log_y(ax)
    ax.set_ylabel("speedup (barrier time / pairwise time)")
    _legend_right(fig, [ax])
    return _save(fig, plt, out_dir, "sync_barrier_vs_pairwise")


def _kernel_bandwidth(model, out_dir: Path):
    if not model.inputs.kernel_bandwidth:
        return "no kernel-bandwidth result given"
    plt, sns = _seaborn()
    fig, axes = _grid(plt, 1, 1)
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
        part = part[part[column].notna()].sort_values("bytes")
        ax.plot(part["bytes"], part[column], marker="o", markersize=3, color=colour, label=label)
    _draw_ceilings(ax, model.kernel_ceilings, _ceiling_styles(model.kernel_ceilings))
    _bytes_axis(ax, sizes)
    _log_y(ax)
    ax.set_ylabel("GB/s")
    _legend_right(fig, [ax])
    return _save(fig, plt, out_dir, "kernel_bandwidth")


_DRAW: dict[str, Callable] = {
    "time_vs_size": _time_vs_size,
    "bandwidth_vs_size": _bandwidth_vs_size,
    "ring_vs_peers": _ring_vs_peers,
    "gpu_vs_cpu_speedup": _gpu_vs_cpu,
    "scaling_nodes": _scaling,
    "profile_steps": _profile_steps,
    "sync_barrier_vs_pairwise": _sync,
    "kernel_bandwidth": _kernel_bandwidth,
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
