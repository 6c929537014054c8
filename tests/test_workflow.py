"""The Snakemake workflow, without running a benchmark: dry-run plans of every target, the
one-line stops when a piece is missing, config validation, lint and formatting.

Each test runs Snakemake in a copy of the workflow files, so nothing is written to the
checkout. GPUs, MPI and nsys are pinned by config (``gpus``, ``mpi.launcher``,
``nsys.executable``) so that the plans do not depend on this machine.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_bench import SMALL_CEILINGS_ENV

from ring.bench.seed_cpp.build import compiler_problem

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_PATHS = ("Snakefile", "config", "workflow", "profiles", "envs")
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install {name})")
    return found


def copy_workflow(dest: Path, extra: tuple[str, ...] = ()) -> Path:
    """The workflow files (and ``extra`` paths) copied to ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_PATHS + extra:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    return dest


def job_env() -> dict[str, str]:
    """This interpreter's bin first on PATH: jobs run `python -m ring...`."""
    env = {**os.environ, **SMALL_CEILINGS_ENV}  # the jobs test the workflow, not the machine
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def snakemake(
    workdir: Path, *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("snakemake"), *args],
        cwd=workdir,
        env=job_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@dataclass
class Job:
    rule: str
    output: list[str] = field(default_factory=list)
    wildcards: dict[str, str] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)
    shell: str = ""


_JOB_START = re.compile(r"^(?:local)?rule (\w+):$")


def parse_plan(text: str) -> list[Job]:
    """The jobs of a dry run, from Snakemake's per-job blocks."""
    jobs: list[Job] = []
    for line in text.splitlines():
        start = _JOB_START.match(line.strip())
        if start:
            jobs.append(Job(start.group(1)))
            continue
        if not jobs:
            continue
        key, _, value = line.strip().partition(": ")
        if key == "output":
            jobs[-1].output = value.split(", ")
        elif key == "wildcards":
            jobs[-1].wildcards = dict(item.split("=", 1) for item in value.split(", "))
        elif key == "resources":
            jobs[-1].resources = dict(
                item.split("=", 1) for item in value.split(", ") if "=" in item
            )
        elif line.startswith("Shell command:"):
            jobs[-1].shell = line.removeprefix("Shell command:").strip()
    return jobs


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("workflow"))


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> dict[str, str]:
    """Executables that exist (for the DAG-build checks) but are never run in a dry run."""
    folder = tmp_path_factory.mktemp("bin")
    paths = {}
    for name in ("nsys", "mpirun"):
        path = folder / name
        path.write_text("#!/bin/sh\necho 'stub: not for running' >&2\nexit 99\n")
        path.chmod(0o755)
        paths[name] = str(path)
    return paths


def pinned_config(tmp: Path, stubs: dict[str, str], *, mpi: bool = True, nsys: bool = True):
    """A config file that fixes where mpirun and nsys are (present as stubs, or absent)."""
    launcher = f"{stubs['mpirun']} --oversubscribe" if mpi else "no-such-mpirun"
    executable = stubs["nsys"] if nsys else "no-such-nsys"
    path = tmp / f"pinned_mpi{int(mpi)}_nsys{int(nsys)}.yaml"
    path.write_text(f"mpi:\n  launcher: {launcher}\nnsys:\n  executable: {executable}\n")
    return str(path)


def dry_run(workdir: Path, targets, *configs: str, config_args=(), env=None) -> list[Job]:
    args = ["-n", *targets, "--configfile", "config/ci.yaml", *configs]
    if config_args:
        args += ["--config", *config_args]
    done = snakemake(workdir, *args, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return parse_plan(done.stdout + done.stderr)


def counts(jobs: list[Job]) -> Counter:
    return Counter(job.rule for job in jobs)


needs_mpi4py = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None, reason="mpi4py not installed"
)

# config/ci.yaml: cpu nodes [2, 3] and mpi nodes [2], one job per N holding every backend of
# the kind; gpu backends 2 x nodes [2, 4]; one dtype.
CPU_BACKENDS = ("cpu", "numpy-direct", *(("seed-cpp",) if compiler_problem() is None else ()))
CPU_JOBS = 2
MPI_JOBS = 1
# The threaded ring against MPI_Allreduce, alternated launches: one job per mpi N.
COMPARE_JOBS = 1
# The algorithm sweeps (config key `algorithms`): one job per N of their kind.
ALL_ALGORITHMS = (
    "ring,ring-segmented,ring-bidirectional,recursive-doubling,rabenseifner,hierarchical,direct,"
    "reduce-broadcast"
)
TIMED_RULES = {
    "cpu_algorithms",
    "mpi_algorithms",
    "gpu_algorithms",
    "compare_bench",
    "nsys_overhead_cpu",
    "cpu_bench",
    "mpi_bench",
    "gpu_bench",
    "kernel_bw_sweep",
    "nsys_profile_cpu",
    "nsys_profile_gpu",
}


# -- plans -------------------------------------------------------------------------------


@needs_mpi4py
def test_all_without_gpu_plans_cpu_mpi_profile_and_report(workdir, stubs, tmp_path):
    jobs = dry_run(workdir, ["all"], pinned_config(tmp_path, stubs), config_args=["gpus=0"])
    assert counts(jobs) == {
        "cpu_bench": CPU_JOBS,
        "cpu_algorithms": CPU_JOBS,
        "mpi_bench": MPI_JOBS,
        "mpi_algorithms": MPI_JOBS,
        "compare_bench": COMPARE_JOBS,
        "nsys_profile_cpu": 1,
        "nsys_overhead_cpu": 1,
        "not_measured": 1,
        "build_report": 1,
        "all": 1,
    }
    cpu = {Path(job.output[0]).name for job in jobs if job.rule == "cpu_bench"}
    assert cpu == {f"sweep_n{nodes}_float32.csv" for nodes in (2, 3)}
    cpu_shell = next(job.shell for job in jobs if job.rule == "cpu_bench")
    assert f"--backend {','.join(CPU_BACKENDS)}" in cpu_shell
    report = next(job for job in jobs if job.rule == "build_report")
    assert report.output == [
        "results/figures",
        "results/report/index.html",
        "results/report/report.md",
    ]
    assert report.shell.count("--sweep ") == 2 * (CPU_JOBS + MPI_JOBS)
    # Every algorithm in one run per N, over the algorithms' own (ci: tiny) size range; the
    # ring-only sweeps stay as they were.
    for rule in ("cpu_algorithms", "mpi_algorithms"):
        shell = next(job.shell for job in jobs if job.rule == rule)
        assert f"--algorithm {ALL_ALGORITHMS}" in shell and "-e 16K -f 4" in shell, shell
        assert f"--sweep results/{rule[:3]}/algorithms_n2_float32.csv" in report.shell
    assert "--algorithm" not in cpu_shell
    cpu_algorithms = next(j.shell for j in jobs if j.rule == "cpu_algorithms")
    assert "--sync pairwise " in cpu_algorithms and "--executor nodes,slices " in cpu_algorithms
    # The cpu backend's flag only (it means nothing to mpi); the ring-only sweep stays plain.
    mpi_algorithms = next(j.shell for j in jobs if j.rule == "mpi_algorithms")
    assert "--executor" not in mpi_algorithms and "--executor" not in cpu_shell
    assert report.shell.count("--alternated ") == COMPARE_JOBS
    compare = next(job for job in jobs if job.rule == "compare_bench")
    assert "alternate --nodes 2 --rounds 2" in compare.shell and "-- -d float32" in compare.shell
    assert "--profile results/profiles/cpu" in report.shell
    # The profiler's cost from config/ci.yaml's single pair of runs (the default takes 3).
    overhead = next(job for job in jobs if job.rule == "nsys_overhead_cpu")
    assert "--repeats 1 " in overhead.shell, overhead.shell


@needs_mpi4py
def test_ring_sweeps_time_out_and_mpi_ranks_abort_together(workdir, stubs, tmp_path):
    jobs = dry_run(workdir, ["cpu", "mpi"], pinned_config(tmp_path, stubs))
    for job in jobs:
        if job.rule == "mpi_bench":
            # One rank's exception ends the job (mpi4py's runner), and a hang ends in time.
            assert " python -m mpi4py -m ring.bench " in job.shell, job.shell
        if job.rule in ("mpi_bench", "cpu_bench"):
            assert "--timeout 3600" in job.shell, job.shell


def test_all_with_four_gpus_adds_gpu_sweeps_kernel_and_profiles(workdir, stubs, tmp_path):
    jobs = dry_run(
        workdir, ["all"], pinned_config(tmp_path, stubs, mpi=False), config_args=["gpus=4"]
    )
    plan = counts(jobs)
    assert plan["gpu_bench"] == 4
    assert plan["gpu_algorithms"] == 2
    assert plan["kernel_bw_sweep"] == 1
    assert plan["nsys_profile_gpu"] == 2
    assert plan["mpi_bench"] == 0
    gpu = sorted(
        (job.wildcards["backend"], job.wildcards["nodes"])
        for job in jobs
        if job.rule == "gpu_bench"
    )
    assert gpu == [("gpu", "2"), ("gpu", "4"), ("nccl", "2"), ("nccl", "4")]
    for job in jobs:
        if job.rule == "gpu_bench":
            assert job.resources["gpu"] == job.wildcards["nodes"]
    report = next(job for job in jobs if job.rule == "build_report")
    assert "--kernel-bw results/gpu/kernel_bw_float32.csv" in report.shell
    assert "--profile results/profiles/4gpu" in report.shell


def test_two_gpus_leave_out_n4_unless_devices_may_be_shared(workdir, stubs, tmp_path):
    pinned = pinned_config(tmp_path, stubs, mpi=False)
    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=2"])
    assert {job.wildcards["nodes"] for job in jobs if job.rule == "gpu_bench"} == {"2"}
    assert [job.wildcards["nodes"] for job in jobs if job.rule == "nsys_profile_gpu"] == ["2"]

    shared = dry_run(workdir, ["all"], pinned, config_args=["gpus=2", "shared_devices=True"])
    n4 = [job for job in shared if job.rule == "gpu_bench" and job.wildcards["nodes"] == "4"]
    # NCCL cannot place two nodes on one device; our ring can, and says so.
    assert [job.wildcards["backend"] for job in n4] == ["gpu"]
    assert n4[0].resources["gpu"] == "2"
    assert "--shared-devices 1" in n4[0].shell
    n2 = [job for job in shared if job.rule == "gpu_bench" and job.wildcards["nodes"] == "2"]
    assert len(n2) == 2 and all("--shared-devices" not in job.shell for job in n2)
    algorithms = {j.wildcards["nodes"]: j for j in shared if j.rule == "gpu_algorithms"}
    assert "--shared-devices 1" in algorithms["4"].shell and algorithms["4"].resources["gpu"] == "2"
    profile = next(
        job for job in shared if job.rule == "nsys_profile_gpu" and job.wildcards["nodes"] == "4"
    )
    assert "--gpus 2" in profile.shell and "--shared-devices 1" in profile.shell


def test_gpus_auto_counts_what_nvidia_smi_lists_and_cuda_lets_us_see(workdir, stubs, tmp_path):
    fake = tmp_path / "fake-driver"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        '[ "$1" = -L ] || exit 2\n'
        "echo 'GPU 0: NVIDIA H200 (UUID: GPU-0000)'\n"
        "echo 'GPU 1: NVIDIA H200 (UUID: GPU-0001)'\n"
    )
    smi.chmod(0o755)
    env = job_env()
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    pinned = pinned_config(tmp_path, stubs, mpi=False)

    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=auto"], env=env)
    plan = counts(jobs)
    assert {job.wildcards["nodes"] for job in jobs if job.rule == "gpu_bench"} == {"2"}
    assert plan["gpu_bench"] == 2 and plan["kernel_bw_sweep"] == 1
    assert [job.wildcards["nodes"] for job in jobs if job.rule == "nsys_profile_gpu"] == ["2"]

    env["CUDA_VISIBLE_DEVICES"] = "1"
    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=auto"], env=env)
    plan = counts(jobs)
    assert plan["gpu_bench"] == 0 and plan["kernel_bw_sweep"] == 1


@pytest.mark.parametrize(
    ("target", "config_args", "expected"),
    [
        ("cpu", [], {"cpu_bench": CPU_JOBS, "cpu_algorithms": CPU_JOBS, "cpu": 1}),
        pytest.param(
            "mpi",
            [],
            {"mpi_bench": MPI_JOBS, "mpi_algorithms": MPI_JOBS, "mpi": 1},
            marks=needs_mpi4py,
        ),
        ("gpu", ["gpus=4"], {"gpu_bench": 4, "gpu_algorithms": 2, "gpu": 1}),
        ("kernel_bw", ["gpus=4"], {"kernel_bw_sweep": 1, "kernel_bw": 1}),
        ("nsys_cpu", [], {"nsys_profile_cpu": 1, "nsys_overhead_cpu": 1, "nsys_cpu": 1}),
        ("nsys_2gpu", ["gpus=4"], {"nsys_profile_gpu": 1, "nsys_2gpu": 1}),
        ("nsys_4gpu", ["gpus=4"], {"nsys_profile_gpu": 1, "nsys_4gpu": 1}),
    ],
)
def test_named_target_plans_its_stage_only(workdir, stubs, tmp_path, target, config_args, expected):
    jobs = dry_run(workdir, [target], pinned_config(tmp_path, stubs), config_args=config_args)
    assert counts(jobs) == expected
    if target.startswith("nsys_") and target != "nsys_cpu":
        profile = next(job for job in jobs if job.rule == "nsys_profile_gpu")
        assert profile.wildcards["nodes"] == target.removeprefix("nsys_").removesuffix("gpu")
        assert profile.output[0] == f"results/profiles/{profile.wildcards['nodes']}gpu/" + (
            f"{profile.wildcards['nodes']}gpu.nsys-rep"
        )


def test_report_target_builds_the_report_from_everything_measurable(workdir, stubs, tmp_path):
    pinned = pinned_config(tmp_path, stubs, mpi=False)
    jobs = dry_run(workdir, ["report"], pinned, config_args=["gpus=0"])
    assert counts(jobs) == {
        "cpu_bench": CPU_JOBS,
        "cpu_algorithms": CPU_JOBS,
        "nsys_profile_cpu": 1,
        "nsys_overhead_cpu": 1,
        "not_measured": 1,
        "build_report": 1,
        "report": 1,
    }
    report = next(job for job in jobs if job.rule == "build_report")
    assert "--not-measured results/report/not_measured.json" in report.shell


def test_every_timed_job_takes_the_exclusive_resource(workdir, stubs, tmp_path):
    jobs = dry_run(workdir, ["all"], pinned_config(tmp_path, stubs), config_args=["gpus=4"])
    planned = {job.rule for job in jobs}
    mpi = importlib.util.find_spec("mpi4py") is not None
    without_mpi = TIMED_RULES - {"mpi_bench", "mpi_algorithms", "compare_bench"}
    assert planned >= (TIMED_RULES if mpi else without_mpi)
    for job in jobs:
        if job.rule in TIMED_RULES:
            assert job.resources.get("bench") == "1", job
        elif job.resources:
            assert job.resources.get("bench", "0") == "0", job


def test_default_profile_allows_one_timed_job_at_a_time():
    import yaml

    profile = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())
    assert profile["resources"] == {"bench": 1}
    # Keys a cluster profile given with --profile sets itself would be replaced by these.
    assert not {"cores", "default-resources", "set-resources", "executor"} & set(profile)


def test_slurm_profile_requests_gpus_tasks_and_srun():
    import yaml

    profile = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert "RING_SLURM_PARTITION" in profile["default-resources"]["slurm_partition"]
    assert "RING_SLURM_ACCOUNT" in profile["default-resources"]["slurm_account"]
    rules = profile["set-resources"]
    assert rules["mpi_bench"]["mpi"] == "srun"
    for rule in ("gpu_bench", "kernel_bw_sweep", "nsys_profile_gpu"):
        assert rules[rule]["cpus_per_gpu"] >= 1
    bench = (ROOT / "workflow/rules/bench.smk").read_text()
    assert "{resources.mpi} -n {resources.tasks}" in bench


def test_slurm_profile_dry_run_submits_nothing(workdir, stubs, tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    done = snakemake(
        workdir,
        "-n",
        "all",
        "--workflow-profile",
        "profiles/slurm",
        "--configfile",
        "config/ci.yaml",
        pinned_config(tmp_path, stubs),
        "--config",
        "gpus=4",
        env={**job_env(), "RING_SLURM_PARTITION": "gpu", "RING_SLURM_ACCOUNT": "project"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert counts(parse_plan(done.stdout + done.stderr))["gpu_bench"] == 4


# -- stops before anything runs ------------------------------------------------------------


def stop_line(workdir: Path, target: str, pinned: str, *config_args: str) -> str:
    """Run a real (not dry) target that must stop while the DAG is built; its one line."""
    args = ["--cores", "1", target, "--configfile", "config/ci.yaml", pinned]
    if config_args:
        args += ["--config", *config_args]
    done = snakemake(workdir, *args)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert not (workdir / "results").exists(), "a job ran before the stop"
    return lines[0]


def test_nsys_4gpu_with_fewer_gpus_stops_with_one_line(workdir, stubs, tmp_path):
    line = stop_line(workdir, "nsys_4gpu", pinned_config(tmp_path, stubs), "gpus=2")
    assert line.startswith("error: target nsys_4gpu: needs 4 GPUs")
    assert "shared_devices" in line


def test_nsys_targets_without_nsys_name_the_install_helper(workdir, stubs, tmp_path):
    line = stop_line(workdir, "nsys_cpu", pinned_config(tmp_path, stubs, nsys=False))
    assert "no-such-nsys" in line and "scripts/install_nsys.sh" in line


def test_gpu_targets_without_gpus_stop(workdir, stubs, tmp_path):
    pinned = pinned_config(tmp_path, stubs)
    assert "needs 2 GPUs" in stop_line(workdir, "gpu", pinned, "gpus=0")
    assert "needs 1 GPU" in stop_line(workdir, "kernel_bw", pinned, "gpus=0")


def test_mpi_target_without_launcher_stops(workdir, stubs, tmp_path):
    line = stop_line(workdir, "mpi", pinned_config(tmp_path, stubs, mpi=False))
    assert "no-such-mpirun" in line and "openmpi-bin" in line


def test_all_without_nsys_or_mpi_still_plans_the_rest(workdir, stubs, tmp_path):
    pinned = pinned_config(tmp_path, stubs, mpi=False, nsys=False)
    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=0"])
    assert counts(jobs) == {
        "cpu_bench": CPU_JOBS,
        "cpu_algorithms": CPU_JOBS,
        "not_measured": 1,
        "build_report": 1,
        "all": 1,
    }


def test_without_a_compiler_all_leaves_out_seed_cpp_and_says_why(tmp_path, stubs):
    import json

    workdir = copy_workflow(tmp_path / "wf")
    pinned = pinned_config(tmp_path, stubs, mpi=False, nsys=False)
    env = dict(job_env(), CXX="/nonexistent/g++")
    jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=0"], env=env)
    cpu = [job for job in jobs if job.rule == "cpu_bench"]  # one job per N, every backend
    assert len(cpu) == 2, [job.shell for job in cpu]
    assert all("--backend cpu,numpy-direct " in job.shell for job in cpu), [j.shell for j in cpu]
    args = ["--cores", "1", "results/report/not_measured.json", "--configfile", "config/ci.yaml"]
    done = snakemake(workdir, *args, pinned, "--config", "gpus=0", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads((workdir / "results/report/not_measured.json").read_text())
    seed = next(entry for entry in entries if entry["what"] == "CPU sweeps (seed-cpp)")
    assert "/nonexistent/g++" in seed["why"] and "apt-get install g++" in seed["why"]
    assert seed["how"].endswith("snakemake --cores 8 cpu")


def test_not_measured_says_what_is_absent_and_why(tmp_path, stubs):
    import json

    workdir = copy_workflow(tmp_path / "wf")
    pinned = pinned_config(tmp_path, stubs, mpi=False, nsys=False)
    done = snakemake(
        workdir,
        "--cores",
        "1",
        "results/report/not_measured.json",
        "--configfile",
        "config/ci.yaml",
        pinned,
        "--config",
        "gpus=0",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads((workdir / "results/report/not_measured.json").read_text())
    by_what = {entry["what"]: entry for entry in entries}
    assert set(by_what) == {
        "MPI sweeps (mpi, mpi-allreduce)",
        "GPU sweeps at N = 2 (gpu, nccl)",
        "GPU sweeps at N = 4 (gpu, nccl)",
        "reduction kernel bandwidth (one GPU)",
        "Nsight Systems profile cpu",
        "Nsight Systems profile 2gpu",
        "Nsight Systems profile 4gpu",
    }
    assert "gpus: 0" in by_what["GPU sweeps at N = 4 (gpu, nccl)"]["why"]
    assert "no-such-mpirun" in by_what["MPI sweeps (mpi, mpi-allreduce)"]["why"]
    assert "scripts/install_nsys.sh" in by_what["Nsight Systems profile cpu"]["how"]
    assert by_what["GPU sweeps at N = 4 (gpu, nccl)"]["how"].endswith("snakemake --cores 8 gpu")


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpu:\n  nodes: [0, 2]\n", "0 is less than the minimum of 1"),
        ("bench:\n  max_bytes: 64X\n", "'64X' is not valid under any of the given schemas"),
        ("gpus: some\n", "'some' is not valid under any of the given schemas"),
        ("cpu:\n  sync: [spin]\n", "'spin' is not one of ['pairwise', 'barrier']"),
        ("cpu:\n  node: [2]\n", "('node' was unexpected)"),
        (
            "bench:\n  min_bytes: 1M\n  max_bytes: 1K\n",
            "cpu sweep has min_bytes 1M above max_bytes 1K",
        ),
        ("nsys:\n  profiles:\n    4gpu:\n      nodes: 2\n", "profile '4gpu' profiles 4 nodes"),
    ],
)
def test_bad_config_values_are_named(workdir, tmp_path, text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    done = snakemake(workdir, "-n", "--configfile", str(bad))
    assert done.returncode == 1
    assert message in done.stdout + done.stderr, done.stdout + done.stderr


def test_shipped_configs_validate(workdir):
    for name in ("config.yaml", "full.yaml", "ci.yaml"):
        done = snakemake(workdir, "-n", "cpu", "--configfile", f"config/{name}")
        assert done.returncode == 0, f"{name}: {done.stderr}"


# -- lint and format ---------------------------------------------------------------------------


def test_snakemake_lint_finds_nothing(workdir):
    done = snakemake(workdir, "--lint")
    assert done.returncode == 0, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert "Lints for" not in output
    assert "Congratulations, your workflow is in a good condition!" in output


def test_snakefmt_check_passes():
    done = subprocess.run(
        [tool("snakefmt"), "--check", "Snakefile", "workflow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_named_configs_plan_disjoint_results_and_the_default_keeps_its_paths(
    workdir, stubs, tmp_path
):
    pinned = pinned_config(tmp_path, stubs, mpi=False)

    def outputs(*config_args):
        jobs = dry_run(workdir, ["all"], pinned, config_args=["gpus=0", *config_args])
        return {path for job in jobs for path in job.output}, jobs

    default, _ = outputs()
    assert {
        "results/cpu/sweep_n2_float32.csv",
        "results/profiles/cpu/overhead.json",
        "results/report/not_measured.json",
        "results/report/index.html",
        "results/figures",
    } <= default
    assert all(path.startswith("results/") for path in default)
    small, small_jobs = outputs("name=small")
    big, _ = outputs("name=big")
    assert all(path.startswith("results/small/") for path in small)
    assert not small & big and not small & default
    # The same files, each under its configuration's folder.
    assert {p.removeprefix("results/small/") for p in small} == {
        p.removeprefix("results/") for p in default
    }
    report = next(job for job in small_jobs if job.rule == "build_report")
    assert "--sweep results/small/cpu/sweep_n2_float32.csv" in report.shell
    profile = next(job for job in small_jobs if job.rule == "nsys_profile_cpu")
    assert "--root results/small/profiles " in profile.shell
