"""What the data does not cover: the workflow's record of what it left out on its machine,
then every result the full study expects (:data:`ring.study.EXPECTED`) that the inputs
lack, and every ceiling a run could not measure."""

from __future__ import annotations

from dataclasses import dataclass

from ...study import EXPECTED, TARGETS, Expected, command
from ...study.targets import NSYS_INSTALL
from . import profiles
from .ceilings import DEVICE_BACKENDS, flatten_ceilings

__all__ = ["Missing", "not_measured"]


@dataclass(frozen=True)
class Missing:
    what: str
    why: str
    command: str
    where: str = ""  # e.g. "on a machine with GPUs"


def not_measured(model) -> list[Missing]:
    """What the workflow left out (its record), then what else the inputs lack."""
    record = model.inputs.left_out or ()
    missing = [Missing(e.what, e.why, e.command, e.where) for e in record]
    covered = {entry.target for entry in record}
    for expected in EXPECTED:
        if expected.target in covered or _present(model, expected):
            continue
        where = "on a machine with GPUs" if "gpu" in expected.needs else ""
        why = _why_missing(model, expected)
        missing.append(Missing(expected.what, why, command(expected.target), where))
    return missing + _unmeasured_ceilings(model)


def _unmeasured_ceilings(model) -> list[Missing]:
    missing = []
    for run in model.inputs.runs:
        # The workflow target that writes a run's results: its folder under results/.
        folder = run.csv_path.parent.name
        target = folder if folder in TARGETS else "all"
        for name, value in flatten_ceilings(run.ceilings):
            if value is None:
                missing.append(
                    Missing(
                        f"ceiling {name} of {run.name}",
                        f"null in {run.csv_path.with_suffix('.json').name} (the run could not "
                        "measure it)",
                        command(target),
                        "where the ceiling can be measured",
                    )
                )
    return missing


def _local_kernels(model) -> list:
    return list(model.inputs.kernel_bandwidth)


def _present(model, expected: Expected) -> bool:
    if expected.key == "kernel_bw":
        return bool(_local_kernels(model))
    if expected.key.startswith("nsys_"):
        return any(profiles.profile_kind(p.name) == expected.key for p in model.inputs.profiles)
    backend, _, sync = expected.key.partition(" ")
    rows = model.rows
    rows = rows[rows["backend"] == backend]
    if sync:
        rows = rows[rows["sync"] == sync]
    return not rows.empty


def _no_gpu_anywhere(model) -> bool:
    if set(model.rows["backend"]) & set(DEVICE_BACKENDS) or _local_kernels(model):
        return False
    return all(not run.environment.get("gpus") for run in model.inputs.every_run())


def _no_mpi_anywhere(model) -> bool:
    return all(not run.environment.get("mpi_library") for run in model.inputs.every_run())


def _why_missing(model, expected: Expected) -> str:
    local = model.inputs.every_run()
    hosts = ", ".join(sorted({str(run.environment.get("host")) for run in local}))
    files = (
        local[0].csv_path.with_suffix(".json").name
        if len(local) == 1
        else f"all {len(local)} result JSONs"
    )
    reasons = []
    if "gpu" in expected.needs and _no_gpu_anywhere(model):
        reasons.append(f"no GPU on {hosts} (`environment.gpus` is empty in {files})")
    if expected.needs == "mpi" and _no_mpi_anywhere(model):
        reasons.append(
            f"no MPI library recorded on {hosts} (`environment.mpi_library` is null in {files})"
        )
    if "nsys" in expected.needs:
        reasons.append(
            "no profile was given to the report; profiling needs Nsight Systems "
            f"(`nsys`; on Debian: `{NSYS_INSTALL}`)"
        )
    if not reasons:
        reasons.append("no result file for it was given to the report")
    return "; ".join(reasons)
