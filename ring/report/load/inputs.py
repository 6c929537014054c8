"""Everything a report is built from, read once, with errors that name the file.

Inputs the caller names are required: each must exist and parse, or the build stops before
anything is written.  Results the caller does not name are "not measured" and the report
says so; they are never filled in.

* run: ``FILE.csv`` from ``python -m ring.bench`` with ``FILE.json`` (and the calls,
  ``FILE.samples.csv``) beside it: a sweep, a screen of every algorithm, the original
  study's size;
* confirmation: a launch set (``python -m ring.bench launches --finalists``): a screen's
  picks and the peers in alternated launches, what the findings rest on;
* fit: the α–β–γ model fitted to this build's screens (``python -m ring.model fit``);
* kernel bandwidth: the single-GPU reduction-kernel sweep;
* profile: ``results/profiles/<name>/`` holding ``tables/*.csv`` from ``python -m ring.nsys``;
* alternated: ``python -m ring.bench alternate`` (two backends that cannot share a launch);
* hosts: the model across emulated hosts (``python -m ring.model hosts``), its prediction
  beside the times measured there;
* reference: a folder of results measured on another machine and committed, kept apart
  (:mod:`.references`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from ...model.costs import ModelInputError
from ...model.fit import Fit
from ...model.table import load_fits
from ...study import RECORD_KEYS, LeftOut
from .alternated import Alternated, load_alternated
from .files import ReportInputError
from .hosts import HostsModel, load_hosts_model
from .profiles import Profile, load_profile
from .references import Reference, load_reference
from .runs import KernelBandwidth, LaunchSet, Run, load_kernel_bandwidth, load_launch_set, load_run

__all__ = ["Inputs", "load_inputs", "load_not_measured"]


@dataclass
class Inputs:
    """This build's results, and apart from them the references of other machines."""

    runs: list[Run]
    confirmations: list[LaunchSet] = field(default_factory=list)
    fits: list[tuple[Fit, Path]] = field(default_factory=list)  # each with its file
    kernel_bandwidth: list[KernelBandwidth] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)
    alternated: list[Alternated] = field(default_factory=list)
    left_out: list[LeftOut] | None = None  # None: the workflow's record was not given
    references: list[Reference] = field(default_factory=list)
    hosts: list[HostsModel] = field(default_factory=list)  # the model across emulated hosts

    def rows(self) -> pd.DataFrame:
        """Every row of this build's runs (not the confirmations'), tagged with its run."""
        frames = [run.rows.assign(run=run.name) for run in self.runs]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def every_run(self) -> list[Run]:
        """This build's runs and every launch of its confirmations."""
        return self.runs + [run for s in self.confirmations for run in s.launches]

    def run_named(self, name: str) -> Run:
        return next(run for run in self.every_run() if run.name == name)


def load_not_measured(path: str | Path) -> list[LeftOut]:
    """Read the workflow's record of what this machine could not measure
    (:class:`ring.study.LeftOut`, field by field)."""
    path = Path(path)
    if not path.is_file():
        raise ReportInputError(f"{path}: missing")
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportInputError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and all(isinstance(e.get(k), str) for k in RECORD_KEYS) for e in entries
    ):
        raise ReportInputError(
            f"{path}: expected a list of objects with string keys {list(RECORD_KEYS)}"
        )
    return [LeftOut.from_record(entry) for entry in entries]


def _fits(paths: Sequence[str | Path]) -> list[tuple[Fit, Path]]:
    fits = []
    for path in paths:
        try:
            fits += [(fit, Path(path)) for fit in load_fits(path)]
        except ModelInputError as exc:
            raise ReportInputError(str(exc)) from None
    return fits


def _unique_names(runs: list[Run]) -> list[Run]:
    """Runs are named by file; the folder joins the name only where names repeat."""
    stems = [run.name for run in runs]
    return [
        replace(run, name=f"{run.csv_path.parent.name}/{run.name}")
        if stems.count(run.name) > 1
        else run
        for run in runs
    ]


def load_inputs(
    runs: Sequence[str | Path],
    *,
    confirmations: Sequence[str | Path] = (),
    fits: Sequence[str | Path] = (),
    kernel_bandwidth: Sequence[str | Path] = (),
    profiles: Sequence[str | Path] = (),
    alternated: Sequence[str | Path] = (),
    not_measured: str | Path | None = None,
    references: Sequence[str | Path] = (),
    hosts: Sequence[str | Path] = (),
) -> Inputs:
    """Load every named input; the first bad one raises :class:`ReportInputError`."""
    names = [Path(p).name for p in references]
    if len(set(names)) < len(names):
        raise ReportInputError(f"two reference folders share a name: {list(map(str, references))}")
    if not runs and not confirmations:
        raise ReportInputError(
            "no result of this build given: the report needs at least one ring.bench CSV "
            "(e.g. results/cpu/sweep_n2_float32.csv from `snakemake --cores 8 cpu`)"
        )
    paths = [Path(p).resolve() for p in [*runs, *confirmations]]
    if len(set(paths)) < len(paths):
        raise ReportInputError(f"the same result file is given twice: {list(map(str, paths))}")
    return Inputs(
        runs=_unique_names([load_run(p) for p in runs]),
        confirmations=[load_launch_set(p) for p in confirmations],
        fits=_fits(fits),
        kernel_bandwidth=[load_kernel_bandwidth(p) for p in kernel_bandwidth],
        profiles=[load_profile(p) for p in profiles],
        alternated=[load_alternated(p) for p in alternated],
        left_out=None if not_measured is None else load_not_measured(not_measured),
        references=[load_reference(folder) for folder in references],
        hosts=[load_hosts_model(path) for path in hosts],
    )
