"""What `all` leaves out on this machine, why, and the target that would produce it.

The workflow writes these records (``results/report/not_measured.json``) when it builds its
DAG, and the report reads them back field by field: ``target`` names the workflow target,
``where`` the piece it needs first; the command is :func:`~ring.study.targets.command`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .plan import Study
from .targets import COMPILED_BACKENDS, DEVICE_PER_NODE, MPI_HINT, NSYS_INSTALL, PROFILE_GPUS
from .targets import command as target_command

__all__ = ["RECORD_KEYS", "LeftOut", "left_out"]

RECORD_KEYS = ("what", "why", "where", "target")


@dataclass(frozen=True)
class LeftOut:
    """One result group not measured here, decided when the DAG was built."""

    what: str
    why: str
    where: str  # what to get or where to go first, e.g. "on a machine with 4 GPUs"
    target: str  # the workflow target that makes it

    @property
    def command(self) -> str:
        return target_command(self.target)

    @property
    def how(self) -> str:
        """Where and the command, in one sentence for a person reading the record."""
        return f"{self.where}: {self.command}" if self.where else self.command

    def record(self) -> dict[str, str]:
        return {**{key: getattr(self, key) for key in RECORD_KEYS}, "how": self.how}

    @classmethod
    def from_record(cls, entry: Mapping[str, str]) -> LeftOut:
        return cls(*(entry[key] for key in RECORD_KEYS))


def left_out(study: Study) -> list[LeftOut]:
    """Every result group of the configuration that this machine cannot produce."""
    return [*_compiled(study), *_mpi(study), *_gpu_sweeps(study), *_profiles(study)]


def _compiled(study: Study) -> list[LeftOut]:
    if study.machine.cxx.ok:
        return []
    wanted = sorted(COMPILED_BACKENDS & set(study.config["cpu"]["backends"]))
    why = study.machine.cxx.why
    return [LeftOut(f"CPU sweeps ({b})", why, "with a C++20 compiler", "cpu") for b in wanted]


def _mpi(study: Study) -> list[LeftOut]:
    if study.machine.mpi.ok:
        return []
    backends = ", ".join(study.config["mpi"]["backends"])
    return [LeftOut(f"MPI sweeps ({backends})", study.machine.mpi.why, f"{MPI_HINT}, then", "mpi")]


def _gpu_sweeps(study: Study) -> list[LeftOut]:
    absent = []
    backends = study.config["gpu"]["backends"]
    for nodes in study.config["gpu"]["nodes"]:
        where = f"on a machine with {nodes} GPUs"
        shortfall = study.gpu_shortfall(nodes)
        if shortfall:
            what = f"GPU sweeps at N = {nodes} ({', '.join(backends)})"
            absent.append(LeftOut(what, shortfall, where, "gpu"))
        elif study.shares_devices(nodes):
            for backend in sorted(DEVICE_PER_NODE & set(backends)):
                why = (
                    f"{backend} needs one device per node, {study.machine.gpus_how}; "
                    "shared_devices applies to our ring only"
                )
                what = f"GPU sweep at N = {nodes} ({backend})"
                absent.append(LeftOut(what, why, where, "gpu"))
    shortfall = study.gpu_shortfall(1)
    if shortfall:
        what = "reduction kernel bandwidth (one GPU)"
        absent.append(LeftOut(what, shortfall, "on a machine with a GPU", "kernel_bw"))
    return absent


def _profiles(study: Study) -> list[LeftOut]:
    absent = []
    for name in study.config["nsys"]["profiles"]:
        why = study.profile_possible(name)
        if not why:
            continue
        needs = [f"{PROFILE_GPUS[name]} GPUs"] if name in PROFILE_GPUS else []
        needs.append(f"nsys ({NSYS_INSTALL})")
        where = f"on a machine with {' and '.join(needs)}"
        absent.append(LeftOut(f"Nsight Systems profile {name}", why, where, f"nsys_{name}"))
    return absent
