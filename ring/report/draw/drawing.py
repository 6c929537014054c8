"""How every figure of the report is drawn: matplotlib set-up, axes, legends, ceilings, saving.

Matplotlib runs on the Agg backend and seaborn is imported only when a figure is drawn
(:func:`seaborn_pyplot`), so importing this module stays cheap.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from ..words.fmt import format_bytes

__all__ = [
    "DASHES",
    "LEGEND_PER_PANEL",
    "MAX_SERIES",
    "TITLES_PER_PANEL",
    "bytes_axis",
    "ceiling_styles",
    "draw_ceilings",
    "grid",
    "legend_right",
    "line_with_band",
    "log_y",
    "save",
    "seaborn_pyplot",
    "size_line",
]

_DPI = 110
_PANEL = (4.6, 3.4)


def seaborn_pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.85)
    return plt, sns


def bytes_axis(ax, sizes) -> None:
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


def log_y(ax) -> None:
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


# At most this many data series in one panel: beyond it a reader cannot tell them apart.
MAX_SERIES = 6
# Data series per panel of each figure drawn in this process (the tests read it).
SERIES_PER_PANEL: dict[str, list[int]] = {}


def series_in(ax) -> int:
    """Labelled data lines of a panel (reference lines drawn across it, like a ceiling or
    1×, do not count) plus the hue groups of a bar chart."""
    labels = {
        line.get_label()
        for line in ax.get_lines()
        if not line.get_label().startswith("_") and list(line.get_xdata()) != [0, 1]
    }
    bars = {c.get_label() for c in ax.containers if not str(c.get_label()).startswith("_")}
    return len(labels) + len(bars)


# Each panel's title and legend entries, per figure drawn in this process (the tests read them).
TITLES_PER_PANEL: dict[str, list[str]] = {}
LEGEND_PER_PANEL: dict[str, list[int]] = {}


def _panels(fig) -> list:
    """The axes that show data: not a colorbar's, not one left hidden."""
    return [
        ax for ax in fig.axes if ax.get_visible() and ax.has_data() and not hasattr(ax, "_colorbar")
    ]


def save(fig, plt, out_dir: Path, name: str) -> tuple[Path, Path]:
    png, svg = out_dir / f"{name}.png", out_dir / f"{name}.svg"
    panels = _panels(fig)
    SERIES_PER_PANEL[name] = [series_in(ax) for ax in panels]
    TITLES_PER_PANEL[name] = [ax.get_title() for ax in panels]
    LEGEND_PER_PANEL[name] = [
        len(ax.get_legend().get_texts()) if ax.get_legend() is not None else 0 for ax in panels
    ] + [len(legend.get_texts()) for legend in fig.legends]
    _denser_log_ticks(fig)
    # SVG text stays text (searchable), and no timestamp makes reruns byte-identical.
    fig.savefig(png, dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
        fig.savefig(svg, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return png, svg


def legend_right(fig, axes) -> None:
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


def grid(plt, rows: int, cols: int, *, sharey="row", sharex=True):
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


def size_line(ax, data: pd.DataFrame, y: str, colour, label, style=None) -> pd.DataFrame:
    """``y`` against the buffer size, one marker per measured size; returns ``data`` sorted."""
    data = data.sort_values("bytes")
    ax.plot(
        data["bytes"], data[y], color=colour, label=label, marker="o", markersize=3, **(style or {})
    )
    return data


def line_with_band(ax, data: pd.DataFrame, y: str, low: str, high: str, colour, label, style):
    data = size_line(ax, data, y, colour, label, style)
    ax.fill_between(data["bytes"], data[low], data[high], color=colour, alpha=0.2, linewidth=0)


DASHES: tuple[dict[str, str], ...] = (
    {},
    {"linestyle": "--"},
    {"linestyle": ":"},
    {"linestyle": "-."},
)


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


def ceiling_styles(ceilings: pd.DataFrame) -> dict[str, dict]:
    """One grey and dash per ceiling family, the same in every panel, unlike any series."""
    families = sorted(set(_ceiling_families(ceilings)["family"]))
    shades = ("0.1", "0.45", "0.7")
    return {
        family: {"color": shades[i % len(shades)], **DASHES[1 + (i // len(shades)) % 3]}
        for i, family in enumerate(families)
    }


def draw_ceilings(ax, ceilings: pd.DataFrame, styles: dict) -> None:
    for family in _ceiling_families(ceilings).itertuples():
        style = styles[family.family]
        # Named with the runs that measured it: a ceiling belongs to its run.
        label = f"ceiling {family.family} ({family.runs})"
        if family.max > family.min:
            ax.axhspan(family.min, family.max, color=style["color"], alpha=0.25, label=label)
        else:
            ax.axhline(family.max, linewidth=1.3, label=label, **style)
