"""Everything the report shows, derived once from the loaded inputs.

The tables and findings here are this build's alone: the references of other machines
(``inputs.references``) are read by their own section and by nothing here.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import pandas as pd

from ..load import Inputs, Run
from . import ceilings as ceiling_data
from . import confirmed, coverage, nccl, original, profiles
from .series import is_peer, kind_of, label, workers_per_core

__all__ = ["ReportModel"]


class ReportModel:
    """The derived tables; attributes are computed on first use."""

    def __init__(self, inputs: Inputs):
        self.inputs = inputs

    # --- rows ---------------------------------------------------------------------------

    @cached_property
    def rows(self) -> pd.DataFrame:
        """Every row of this build's runs, with what ran (``label``), whether it is a peer,
        its kind and its workers per core."""
        rows = self.inputs.rows()
        if rows.empty:
            return rows
        runs = {run.name: run for run in self.inputs.runs}
        records = rows.to_dict("records")
        return rows.assign(
            label=[label(r) for r in records],
            peer=[is_peer(r) for r in records],
            kind=[kind_of(str(r["backend"])) for r in records],
            per_core=[workers_per_core(r, runs[r["run"]].environment) for r in records],
        )

    @property
    def plot_rows(self) -> pd.DataFrame:
        return self.rows[self.rows["bytes"] > 0] if not self.rows.empty else self.rows

    def runs_of(self, names) -> list[Run]:
        return [run for run in self.inputs.runs if run.name in set(names)]

    @cached_property
    def screens(self) -> list[Run]:
        """Runs that measured several algorithms of ours beside the peers (the screens)."""
        found = []
        for run in self.inputs.runs:
            ours = run.rows[~run.rows.apply(is_peer, axis=1)]
            if ours["algorithm"].nunique() > 1:
                found.append(run)
        return found

    # --- the findings -------------------------------------------------------------------

    @cached_property
    def confirmations(self) -> list[confirmed.Confirmation]:
        screened = {}  # series of ours per screen, by the screen's CSV digest
        for run in self.inputs.runs:
            ours = run.rows[~run.rows.apply(is_peer, axis=1)]
            keys = ["backend", "sync", "algorithm", "executor", "buffers"]
            screened[str(run.meta.get("csv_sha256"))] = len(ours[keys].drop_duplicates())
        fits = [fit for fit, _ in self.inputs.fits]
        return confirmed.confirmations(self.inputs.confirmations, fits, screened)

    @cached_property
    def regimes(self) -> list[list[confirmed.Regime]]:
        """Each confirmation's regimes, in the confirmations' order."""
        return [confirmed.regimes(c) for c in self.confirmations]

    # --- nccl-tests' tables and the original study --------------------------------------

    @cached_property
    def nccl_tables(self) -> list[nccl.NcclTable]:
        """nccl-tests' tables of every run but the screens (whose every algorithm the
        screens' own tables show)."""
        screens = {run.name for run in self.screens}
        return nccl.nccl_tables([run for run in self.inputs.runs if run.name not in screens])

    @cached_property
    def original_rows(self) -> pd.DataFrame:
        rows = self.rows
        return rows if rows.empty else original.at_original_size(rows)

    # --- ceilings -----------------------------------------------------------------------

    @cached_property
    def ceilings(self) -> pd.DataFrame:
        return ceiling_data.all_ceilings(self.inputs.runs)

    @cached_property
    def ceiling_fractions(self) -> pd.DataFrame:
        llc = {run.name: ceiling_data.llc_bytes(run) for run in self.inputs.runs}
        rows = self.rows.assign(series=self.rows["label"]) if not self.rows.empty else self.rows
        return ceiling_data.ceiling_fractions(rows, self.ceilings, llc)

    @cached_property
    def kernel_summary(self) -> pd.DataFrame:
        return ceiling_data.kernel_summary(self.inputs.kernel_bandwidth)

    @cached_property
    def drifts(self) -> dict[str, float]:
        """Each run's (and launch's) ceiling drift between its start and its end."""
        return {
            run.name: d
            for run in self.inputs.every_run()
            if (d := ceiling_data.drift(run)) is not None
        }

    # --- profiles and what is not measured ----------------------------------------------

    @cached_property
    def _profile_figures(self):
        return profiles.step_and_wait_tables(self.inputs.profiles)

    @property
    def profile_steps(self) -> pd.DataFrame | None:
        return self._profile_figures[0]

    @property
    def profile_waits(self) -> pd.DataFrame | None:
        return self._profile_figures[1]

    @cached_property
    def not_measured(self) -> list[coverage.Missing]:
        return coverage.not_measured(self)

    # --- provenance ---------------------------------------------------------------------

    @cached_property
    def commits(self) -> list[tuple[str, bool | None]]:
        """The commits (and dirty flags) of this build's runs; one, where the build is one."""
        found = {(run.commit, run.dirty) for run in self.inputs.every_run()}
        return sorted(found, key=lambda c: (c[0], str(c[1])))

    @cached_property
    def machine(self) -> str:
        """This build's machine in words (the first run's environment)."""
        runs = self.inputs.every_run()
        env = runs[0].environment if runs else {}
        cores = env.get("cores")
        model = env.get("cpu_model") or "an unrecorded CPU"
        return f"{model}, {cores} cores" if cores else str(model)

    def source(self, name: str) -> Path:
        return self.inputs.run_named(name).csv_path
