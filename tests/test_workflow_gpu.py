"""The workflow's GPU targets on a one-GPU machine with shared devices (dry runs): the
command the device check runs, ``snakemake --cores 16 gpu kernel_bw nsys_4gpu --config
gpus=1 shared_devices=true``."""

from __future__ import annotations

import pytest
from workflow_helpers import copy_workflow, counts, dry_run, pinned_config

# Slow (tests/tiers.py): Snakemake dry runs of the workflow.
pytestmark = pytest.mark.slow


def test_gpu_targets_with_shared_devices_spelled_as_on_the_command_line(tmp_path):
    stub = tmp_path / "bin" / "nsys"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 99\n")
    stub.chmod(0o755)
    workdir = copy_workflow(tmp_path / "wf")
    pinned = pinned_config(tmp_path, {"nsys": str(stub), "mpirun": str(stub)})
    for spelling in ("true", "True"):
        jobs = dry_run(
            workdir,
            ["gpu", "kernel_bw", "nsys_4gpu"],
            pinned,
            config_args=["gpus=1", f"shared_devices={spelling}"],
        )
        assert counts(jobs)["nsys_profile_gpu"] == 1
        profile = next(job for job in jobs if job.rule == "nsys_profile_gpu")
        assert "--gpus 1" in profile.shell
        assert "--shared-devices 1" in profile.shell and "--graphs 0" in profile.shell
        sweeps = [job for job in jobs if job.rule == "gpu_run"]
        assert sweeps and all("--shared-devices 1" in job.shell for job in sweeps)
