"""The study module (ring.study): one list of targets for the workflow and the report, one
GPU counter, and a record of what was left out that the report reads field by field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ring.machine import count_gpus
from ring.nsys import GpuNotFoundError, require_gpus
from ring.report.load import load_not_measured
from ring.study import EXPECTED, TARGETS, LeftOut, command

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def four_gpus(tmp_path, monkeypatch):
    """An nvidia-smi that lists four devices, first on PATH."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ "$1" = -L ] || exit 2\n'
        + "".join(f"echo 'GPU {i}: NVIDIA H200 (UUID: GPU-000{i})'\n" for i in range(4))
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_gpu_counter_honours_cuda_visible_devices(four_gpus, monkeypatch):
    assert count_gpus() == (4, "nvidia-smi -L")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    count, how = count_gpus()
    assert count == 2 and "CUDA_VISIBLE_DEVICES='0,2'" in how
    # The profiler's check counts the same way: three nodes do not fit on two visible GPUs.
    with pytest.raises(GpuNotFoundError, match=r"needs 3 CUDA GPU\(s\), found 2"):
        require_gpus(3, "profile")
    assert require_gpus(2, "profile") == 2


def test_every_expected_target_is_a_workflow_rule():
    rules = set(re.findall(r"^rule (\w+):", (ROOT / "Snakefile").read_text(), re.MULTILINE))
    assert set(TARGETS) <= rules
    assert {expected.target for expected in EXPECTED} == set(TARGETS)


def test_common_smk_holds_input_functions_only():
    lines = (ROOT / "workflow/rules/common.smk").read_text().splitlines()
    assert len(lines) <= 120
    # The GPU count, the probes and the not-measured logic live in ring.study.
    assert not any("nvidia-smi" in line or "def not_measured(" in line for line in lines)


def test_left_out_record_is_read_back_field_by_field(tmp_path):
    entry = LeftOut("GPU sweeps at N = 4 (gpu)", "needs 4 GPUs", "on a machine with 4 GPUs", "gpu")
    record = entry.record()
    assert record["how"] == "on a machine with 4 GPUs: snakemake --cores 8 gpu"
    # The report takes the target from its field, not from the sentence.
    record["how"] = "anything a person wrote"
    path = tmp_path / "not_measured.json"
    path.write_text(json.dumps([record]))
    (back,) = load_not_measured(path)
    assert back == entry and back.command == command("gpu")


def test_old_record_without_fields_is_refused_in_one_line(tmp_path):
    from ring.report import ReportInputError

    path = tmp_path / "not_measured.json"
    path.write_text(json.dumps([{"what": "x", "why": "y", "how": "snakemake --cores 8 mpi"}]))
    with pytest.raises(ReportInputError, match=r"where.*target") as error:
        load_not_measured(path)
    assert "\n" not in str(error.value)


def test_algorithm_sweep_flags_reach_the_harness():
    import yaml

    from ring.study import Machine, Probe, Study
    from ring.study.config import check_config

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["algorithms"].update(names=["ring", "rabenseifner", "direct"], max_bytes="4M")
    check_config(config, ROOT / "workflow/schemas/config.schema.yaml")
    here = Probe(True, "stub")
    study = Study(config, Machine(0, "none", here, here, here))
    cpu = study.algorithm_args("cpu").split()
    assert cpu[cpu.index("--algorithm") + 1] == "ring,rabenseifner,direct"
    assert cpu[cpu.index("--sync") + 1] == "pairwise"
    assert cpu[cpu.index("-e") + 1] == "4M"  # the algorithms' range, not the sweep's 256M
    assert "--algorithm" not in study.sweep_args("cpu")  # the ring-only sweep stays so
    assert "--sync" not in study.algorithm_args("mpi")
    # Both executors of the cpu backend; its flag reaches no other backend's sweep.
    assert cpu[cpu.index("--executor") + 1] == "nodes,slices"
    assert "--executor" not in study.sweep_args("cpu")
    assert "--executor" not in study.algorithm_args("mpi")
    assert "--executor" not in study.algorithm_args("gpu")
    # Both kinds of MPI buffers; the flag reaches no other sweep.
    mpi = study.algorithm_args("mpi").split()
    assert mpi[mpi.index("--buffers") + 1] == "host,shared"
    assert "--buffers" not in study.sweep_args("mpi") + study.algorithm_args("cpu")
    assert cpu[cpu.index("--rounds") + 1] == str(config["algorithms"]["rounds"])
    config["algorithms"]["iters"] = 3  # never more rounds than timed calls
    assert "--rounds 3" in study.algorithm_args("cpu")
    del config["algorithms"]["executors"]  # without the key: the backend's default alone
    assert "--executor" not in study.algorithm_args("cpu")
    del config["algorithms"]["buffers"]
    assert "--buffers" not in study.algorithm_args("mpi")
    assert study.algorithm_files("gpu") == []  # no GPU here
    assert study.algorithm_files("mpi") == [
        f"results/mpi/algorithms_n{n}_float32.csv" for n in config["mpi"]["nodes"]
    ]


def test_the_rules_take_every_result_path_from_the_study():
    """A sweep's path is spelled in ring.study alone: the rules build theirs from its stems
    (with Snakemake's wildcards), so the files `all` asks for are the ones the rules write."""
    from ring.study import algorithms_stem, sweep_stem

    assert sweep_stem("cpu", 2, "float32") == "cpu/sweep_n2_float32"
    assert sweep_stem("mpi") == "mpi/sweep_n{nodes}_{dtype}"
    assert algorithms_stem("gpu", 4, "float16") == "gpu/algorithms_n4_float16"
    for rules in (ROOT / "workflow/rules").glob("*.smk"):
        text = rules.read_text()
        for spelled in ("sweep_n", "algorithms_n", "kernel_bw_{", "_vs_mpi-allreduce"):
            assert spelled not in text, f"{rules.name} spells {spelled!r}"
