"""The cost-model figure: measured median time per algorithm (markers) and the fitted
model's prediction (lines), one panel per (fit, N)."""

from __future__ import annotations

from pathlib import Path

from .cost_model import CostModel, measured_group
from .drawing import bytes_axis, log_y, save, seaborn_pyplot
from .figure_specs import SPECS, Figure

__all__ = ["COST_MODEL_FIGURE", "draw_cost_model"]

COST_MODEL_FIGURE = SPECS["cost_model"]


def _panels(section: CostModel) -> list[tuple[str, int, dict]]:
    """(title, N, {algorithm: [(bytes, measured s, predicted s)]}) per panel with data."""
    panels = []
    for fit, path in section.fits:
        group = measured_group(fit, path)
        if group is None:
            continue
        for nodes in fit.nodes:
            series: dict[str, list[tuple[int, float, float]]] = {}
            for p in sorted(group.points, key=lambda p: p.nbytes):
                if p.nodes == nodes:
                    predicted = fit.predict(p.algorithm, nodes, p.nbytes)
                    series.setdefault(p.algorithm, []).append((p.nbytes, p.seconds, predicted))
            title = f"{fit.key.get('backend')} on {fit.key.get('machine')}, N = {nodes}"
            panels.append((title, nodes, series))
    return panels


def draw_cost_model(section: CostModel, out_dir: str | Path) -> Figure:
    """Draw the figure into ``out_dir``, or say why it cannot be drawn."""
    panels = _panels(section)
    if not panels:
        for suffix in (".png", ".svg"):  # a figure of an earlier build must not stay
            (Path(out_dir) / f"{COST_MODEL_FIGURE.name}{suffix}").unlink(missing_ok=True)
        return Figure(COST_MODEL_FIGURE, missing="no fit whose source CSVs are at hand")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    plt, sns = seaborn_pyplot()
    columns = min(2, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.6 * rows), squeeze=False)
    names = sorted({a for _, _, series in panels for a in series})
    colours = dict(zip(names, sns.color_palette("tab10", len(names)), strict=True))
    for ax, (title, _, series) in zip(axes.flat, panels, strict=False):
        for algorithm, points in series.items():
            sizes = [s for s, _, _ in points]
            colour = colours[algorithm]
            ax.plot(sizes, [m * 1e6 for _, m, _ in points], "o", ms=3, color=colour)
            ax.plot(sizes, [p * 1e6 for _, _, p in points], "-", lw=1, color=colour)
        bytes_axis(ax, sorted({s for points in series.values() for s, _, _ in points}))
        log_y(ax)
        ax.set_title(title, fontsize=8)
        ax.set_ylabel("time per allreduce (µs)")
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colours[a], marker="o", ms=3, lw=1) for a in names]
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    png, svg = save(fig, plt, Path(out_dir), COST_MODEL_FIGURE.name)
    return Figure(COST_MODEL_FIGURE, png=png, svg=svg)
