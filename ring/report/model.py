"""Everything the figures and the report show, derived once from the loaded inputs."""

from __future__ import annotations

import re
from functools import cached_property

import pandas as pd

from . import algorithms, analysis, ceilings, coverage, gate, intervals, profiles, regimes, trust
from . import caveats as caveat_notes
from . import findings as finding_text
from .coverage import Missing
from .inputs import Inputs

__all__ = ["Missing", "ReportModel"]


class ReportModel:
    """The derived tables; attributes are computed on first use."""

    def __init__(self, inputs: Inputs, alternated=()):
        self.inputs = inputs
        # Comparisons from alternated separate launches (ring.report.alternation).
        self.alternated = list(alternated)

    # --- rows and series --------------------------------------------------------------

    @cached_property
    def rows(self) -> pd.DataFrame:
        """The plain ring and its peers: what every table and figure but the per-algorithm
        ones compares (ring.report.algorithms.headline_rows)."""
        rows = algorithms.headline_rows(self.inputs.sweep_rows())
        return analysis.label_series(analysis.without_slices_traffic(rows))

    @cached_property
    def algorithm_rows(self) -> pd.DataFrame:
        """Every row, every algorithm included (the per-algorithm figures and table)."""
        return self.inputs.sweep_rows()

    @cached_property
    def plot_rows(self) -> pd.DataFrame:
        """Rows a log-size axis can show (a 0-byte call has no place on it)."""
        return self.rows[self.rows["bytes"] > 0]

    @cached_property
    def backends(self) -> set[str]:
        return set(self.rows["backend"])

    def palette(self, sns) -> dict[str, tuple]:
        """One colour per series label, the same in every figure; a reference machine's
        series takes the colour of the same series here (panels never mix machines), so
        fewer colours, further apart, tell a panel's lines apart."""
        labels = sorted(set(self.rows["series"]))

        def colour_key(label: str) -> str:
            label = re.sub(r" @ [^\[\]]+?(?= \[|$)", "", label)
            return re.sub(r"\[[^/\]]+/", "[", label).strip()

        keys = sorted({colour_key(label) for label in labels})
        colours = sns.color_palette("tab10" if len(keys) <= 10 else "husl", len(keys))
        by_key = dict(zip(keys, colours, strict=True))
        return {label: by_key[colour_key(label)] for label in labels}

    # --- comparisons ------------------------------------------------------------------

    @cached_property
    def comparisons(self) -> list[analysis.Comparison]:
        return analysis.comparisons(self.rows)

    def comparison(self, name: str) -> analysis.Comparison | None:
        return next((c for c in self.comparisons if c.name == name), None)

    @cached_property
    def comparison_summaries(self) -> list[tuple[analysis.Comparison, pd.DataFrame]]:
        return [(c, analysis.summarise_comparison(c)) for c in self.comparisons]

    @cached_property
    def one_run_ratios(self) -> pd.DataFrame:
        """Ring-over-peer speedups from one run, per size, with bootstrap intervals."""
        return intervals.one_run_ratios(self)

    @cached_property
    def findings(self) -> list[str]:
        """Further observations (the appendix): every comparison the data allow."""
        return finding_text.findings(self)

    # --- the quality gate and the first screen ---------------------------------------

    @cached_property
    def gate(self) -> pd.DataFrame:
        """What the quality gate sets aside, and why (ring.report.gate)."""
        return gate.set_aside(self)

    @cached_property
    def regime_points(self) -> pd.DataFrame:
        """Our fastest against the fastest peer of the same run, per size (ring.report.regimes)."""
        return regimes.points(self)

    @cached_property
    def main_findings(self) -> list[str]:
        """The first screen: regimes with an action, a same-run ratio and a reason."""
        return regimes.findings(self)

    @cached_property
    def scaling(self) -> pd.DataFrame:
        return analysis.scaling(self.rows)

    @cached_property
    def scaling_at_largest(self) -> pd.DataFrame:
        table = self.scaling
        if table.empty:
            return table
        index = table.groupby(["series", "nodes_a", "nodes_b"])["bytes"].idxmax()
        return table.loc[index.values].reset_index(drop=True)

    # --- bandwidth and ceilings -------------------------------------------------------

    @cached_property
    def busbw_at_largest(self) -> pd.DataFrame:
        return analysis.busbw_at_largest(self.rows)

    @cached_property
    def ceilings(self) -> pd.DataFrame:
        return ceilings.all_ceilings(self.inputs)

    @cached_property
    def ceiling_fractions(self) -> pd.DataFrame:
        llc = {run.name: trust.llc_bytes(run) for run in self.inputs.runs}
        return ceilings.ceiling_fractions(self.rows, self.ceilings, llc)

    # --- kernel bandwidth -------------------------------------------------------------

    @cached_property
    def kernel_summary(self) -> pd.DataFrame:
        return ceilings.kernel_summary(self.inputs.kernel_bandwidth)

    @cached_property
    def kernel_ceilings(self) -> pd.DataFrame:
        return ceilings.kernel_ceilings(self.inputs.kernel_bandwidth)

    # --- profiles ---------------------------------------------------------------------

    @cached_property
    def _profile_figures(self):
        return profiles.step_and_wait_tables(self.inputs.profiles)

    @property
    def profile_steps(self) -> pd.DataFrame | None:
        return self._profile_figures[0]

    @property
    def profile_waits(self) -> pd.DataFrame | None:
        return self._profile_figures[1]

    @property
    def profile_steps_missing(self) -> str:
        if not self.inputs.profiles:
            return "no Nsight Systems profile given"
        return "the profiles hold no per-step NVTX ranges"

    # --- what the data does not cover -------------------------------------------------

    @cached_property
    def not_measured(self) -> list[Missing]:
        return coverage.not_measured(self)

    # --- caveats ----------------------------------------------------------------------

    @cached_property
    def caveats(self) -> list[str]:
        return caveat_notes.caveats(self)
