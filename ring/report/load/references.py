"""Results measured on other machines and committed (``results/reference/<machine>/``).

They are read apart from this build's results and stay apart: the report shows them in a
section of their own, each row with its machine, date, commit and dirty flag, and no table,
figure or finding of this build's takes a number from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from .files import ReportInputError
from .profiles import Profile, load_profile
from .runs import KernelBandwidth, Run, load_kernel_bandwidth, load_run

__all__ = ["Reference", "discover_reference", "load_reference"]


@dataclass(frozen=True)
class Reference:
    """One committed folder: its machine (the folder's name) and what it holds."""

    machine: str
    folder: Path
    runs: list[Run]
    kernels: list[KernelBandwidth]
    profiles: list[Profile]


def discover_reference(folder: str | Path) -> dict[str, list[Path]]:
    """The results of one committed reference folder, by kind.

    Its top-level ``*.csv`` are runs, except those whose name says ``kernel`` and the
    ``FILE.samples.csv`` of a run's timed calls (read with it); ``profiles/*/`` with a
    ``tables/`` folder are profiles.  A folder with none of these is an error: a reference
    that shows nothing is a mistake in the path.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportInputError(f"{folder}: no such reference folder")
    runs: list[Path] = []
    kernel: list[Path] = []
    for csv_path in sorted(folder.glob("*.csv")):
        if csv_path.name.endswith(".samples.csv"):
            continue
        (kernel if "kernel" in csv_path.stem else runs).append(csv_path)
    profiles = sorted(p for p in (folder / "profiles").glob("*") if (p / "tables").is_dir())
    if not (runs or kernel or profiles):
        raise ReportInputError(
            f"{folder}: holds no result (no *.csv at its top, no profiles/*/tables/)"
        )
    return {"runs": runs, "kernels": kernel, "profiles": profiles}


def load_reference(folder: str | Path) -> Reference:
    """Everything in one reference folder, each item named ``<machine>/<file>``."""
    folder = Path(folder)
    machine = folder.name
    found = discover_reference(folder)

    def tag(item):
        return replace(item, name=f"{machine}/{item.name}", machine=machine)

    return Reference(
        machine,
        folder,
        [tag(load_run(p)) for p in found["runs"]],
        [tag(load_kernel_bandwidth(p)) for p in found["kernels"]],
        [tag(load_profile(p)) for p in found["profiles"]],
    )
