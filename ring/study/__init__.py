"""What the study is: the results it expects and the targets that make them, what this
machine offers (GPUs, MPI, nsys, a compiler), the files and harness flags of every sweep
and profile, and what is not measured here and why.

The workflow (``workflow/rules/*.smk``) plans from this package and the report
(``ring.report``) reads the workflow's record through it, so neither keeps its own copy.
"""

from __future__ import annotations

from .absent import RECORD_KEYS, LeftOut, left_out
from .machine import Machine, Probe, job_environment, probe_machine
from .plan import (
    Study,
    algorithms_stem,
    compare_stem,
    confirm_stem,
    finalists_stem,
    gpu_stem,
    kernel_bw_stem,
    original_stem,
    run_stem,
    sweep_stem,
)
from .targets import EXPECTED, TARGETS, Expected, command

__all__ = [
    "EXPECTED",
    "RECORD_KEYS",
    "TARGETS",
    "Expected",
    "LeftOut",
    "Machine",
    "Probe",
    "Study",
    "algorithms_stem",
    "command",
    "compare_stem",
    "confirm_stem",
    "finalists_stem",
    "gpu_stem",
    "job_environment",
    "kernel_bw_stem",
    "left_out",
    "original_stem",
    "probe_machine",
    "run_stem",
    "sweep_stem",
]
