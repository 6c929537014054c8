# Shared by every stage: what this machine offers (GPUs, an MPI launcher, nsys), the sweep
# settings of each kind, and the files each target asks for. Everything here runs once, when
# the DAG is built; nothing here measures anything.

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

from snakemake.exceptions import WorkflowError

from ring import study_config

# -- configuration ------------------------------------------------------------------------
# The Snakefile checked the config (ring.study_config); sweeps read it through this.

# `--config shared_devices=true` gives the string "true" (Snakemake turns only True into a
# bool); the schema allows both spellings, the rules read a bool.
config["shared_devices"] = config["shared_devices"] in (True, "true")


def sweep_settings(kind):
    """The `bench` settings with the overrides of `kind` (cpu, mpi, gpu, kernel_bw)."""
    return study_config.sweep_settings(config, kind)


wildcard_constraints:
    nodes=r"\d+",
    dtype=r"[a-z]+[0-9]+",


# -- what this machine offers -------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """Whether a piece is usable here, and in one phrase why (not)."""

    ok: bool
    why: str


def count_gpus():
    """(count, how it was found). Cheap and never raises: a failed probe counts 0 GPUs."""
    notes = []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        notes.append("nvidia-smi not found")
    else:
        try:
            done = subprocess.run(
                [smi, "-L"], capture_output=True, text=True, timeout=20, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            notes.append(f"nvidia-smi -L failed ({exc})")
        else:
            if done.returncode == 0:
                count = sum(
                    line.startswith("GPU ") for line in done.stdout.splitlines()
                )
                return visible_gpus(count, "nvidia-smi -L")
            notes.append(f"nvidia-smi -L exited {done.returncode}")
    if importlib.util.find_spec("cupy") is None:
        notes.append("CuPy not installed")
        return 0, "; ".join(notes)
    # In a child process: a broken driver can hang or crash the CUDA runtime.
    probe = "import cupy; print(cupy.cuda.runtime.getDeviceCount())"
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        notes.append(f"CuPy probe failed ({exc})")
        return 0, "; ".join(notes)
    if done.returncode == 0 and done.stdout.strip().isdigit():
        return visible_gpus(int(done.stdout.strip()), "CuPy")
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    error = re.sub(r"^[\w.]+Error: ", "", last)
    notes.append(f"CuPy sees no device: {error}")
    return 0, "; ".join(notes)


def visible_gpus(count, how):
    """nvidia-smi lists every device; CUDA_VISIBLE_DEVICES limits what a job can use."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return count, how
    listed = [item for item in visible.split(",") if item.strip()]
    if len(listed) >= count:
        return count, how
    return len(listed), f"{how}, CUDA_VISIBLE_DEVICES={visible!r}"


def probe_gpus():
    """(count, a phrase saying where the count comes from)."""
    if config["gpus"] == "auto":
        count, how = count_gpus()
        return count, f"found {count} ({how})"
    return config["gpus"], f"the config sets gpus: {config['gpus']}"


def probe_mpi():
    launcher = shlex.split(config["mpi"]["launcher"])[0]
    if shutil.which(launcher) is None:
        return Probe(False, f"MPI launcher {launcher!r} not found on PATH")
    if importlib.util.find_spec("mpi4py") is None:
        return Probe(False, "the Python package mpi4py is not installed")
    return Probe(True, f"{launcher} and mpi4py found")


def probe_nsys():
    executable = config["nsys"]["executable"]
    found = shutil.which(executable)
    if found is None:
        return Probe(False, f"Nsight Systems ({executable!r}) not found on PATH")
    return Probe(True, f"nsys at {found}")


def probe_cxx():
    """seed-cpp compiles the original study's C++ design on first use (CXX, default g++)."""
    from ring.bench.seed_cpp.build import compiler_problem

    problem = compiler_problem()
    return Probe(problem is None, problem or "a C++ compiler found")


GPUS, GPUS_HOW = probe_gpus()
MPI = probe_mpi()
NSYS = probe_nsys()
CXX = probe_cxx()
# CPU backends that need CXX; without it they are left out and listed as not measured.
COMPILED_BACKENDS = {"seed-cpp"}

MPI_HINT = (
    "install Open MPI and mpi4py: apt-get install openmpi-bin libopenmpi-dev "
    "&& pip install '.[mpi]' (scripts/setup.sh does both)"
)
NSYS_HINT = "install it with: sudo sh scripts/install_nsys.sh (Debian 12), or use a CUDA toolkit's nsys"

# Jobs run `python -m ring...`: let that be the Python that runs Snakemake (the project's
# virtual environment) even when the environment is not activated. Jobs under --sdm conda
# activate their own environment, which then comes first.
INTERPRETER_BIN = os.path.dirname(sys.executable)
if shutil.which("python", path=INTERPRETER_BIN):
    os.environ.update(
        PATH=os.pathsep.join([INTERPRETER_BIN, os.environ.get("PATH", "")])
    )

if os.geteuid() == 0:
    # Containers and CI runners run as root, which Open MPI refuses without these; other
    # MPI libraries ignore them.
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")


def stop(message):
    """End the run before any job starts, with one line on stderr and exit status 1."""
    sys.exit(f"error: {message}")


def gpu_shortfall(nodes):
    """Why a GPU job over `nodes` nodes cannot run here, or None when it can."""
    if GPUS >= nodes:
        return None
    if GPUS >= 1 and config["shared_devices"]:
        return None
    needed = f"needs {nodes} GPU{'s' if nodes > 1 else ''}, {GPUS_HOW}"
    if GPUS >= 1:
        return (
            f"{needed}; set shared_devices: true to place several nodes on one device"
        )
    return needed


def devices_for(nodes):
    """GPUs a job over `nodes` nodes occupies (fewer than nodes only with shared_devices)."""
    return max(1, min(nodes, GPUS))


def shares_devices(nodes):
    return devices_for(nodes) < nodes


# -- command lines --------------------------------------------------------------------------


def sweep_args(kind):
    """The harness flags of a `kind` sweep, in nccl-tests' vocabulary."""
    s = sweep_settings(kind)
    args = [
        f"-b {s['min_bytes']}",
        f"-e {s['max_bytes']}",
        f"-f {s['step_factor']}",
        f"-n {s['iters']}",
        f"-w {s['warmup']}",
        f"-c {s['check']}",
        f"-o {s['op']}",
        f"--seed {s['seed']}",
    ]
    if kind != "kernel_bw":  # one process on one GPU: no peer to leave waiting
        args.append(f"--timeout {s['timeout']}")
    if "sync" in config[kind]:
        args.append(f"--sync {','.join(config[kind]['sync'])}")
    return " ".join(args)


def profile_args(name):
    """The harness flags of the fixed bench run that profile `name` wraps."""
    p = config["nsys"]["profiles"][name]
    args = [
        f"--backend {p['backend']}",
        f"--nodes {p['nodes']}",
        f"-b {p['bytes']}",
        f"-e {p['bytes']}",
        f"-n {p['iters']}",
        f"-w {p['warmup']}",
        f"-d {p.get('dtype', config['bench']['dtypes'][0])}",
        f"-o {config['bench']['op']}",
        f"--seed {config['bench']['seed']}",
    ]
    if "sync" in p:
        args.append(f"--sync {p['sync']}")
    if p["backend"] == "gpu" and shares_devices(p["nodes"]):
        args.append("--shared-devices 1")
    if p["backend"] == "gpu":
        # The profile explains the steps through their NVTX ranges, which only an eager
        # call has: a replayed CUDA graph enqueues no step from the host.
        args.append("--graphs 0")
    return " ".join(args)


def shared_flag(nodes):
    """The harness flag that lets `nodes` nodes share fewer GPUs (rows say shared_devices)."""
    return "--shared-devices 1" if shares_devices(nodes) else ""


def mpi_machines(wildcards):
    """SLURM's `nodes` (machines) of an MPI sweep: one per rank when the config asks for it,
    else unset (None), leaving the placement of the ranks to the cluster."""
    if config["mpi"].get("one_rank_per_machine", False):
        return int(wildcards.nodes)
    return None


# -- files each target asks for -----------------------------------------------------------


def joint_sweep_files(kind):
    """CPU and MPI: one file per node count holding every backend of the kind."""
    return [
        f"results/{kind}/sweep_n{nodes}_{dtype}.csv"
        for nodes in config[kind]["nodes"]
        for dtype in sweep_settings(kind)["dtypes"]
    ]


def sweep_files(kind, nodes_list=None, backends=None):
    nodes_list = config[kind]["nodes"] if nodes_list is None else nodes_list
    backends = config[kind]["backends"] if backends is None else backends
    return [
        f"results/{kind}/{backend}_n{nodes}_{dtype}.csv"
        for backend in backends
        for nodes in nodes_list
        for dtype in sweep_settings(kind)["dtypes"]
    ]


# NCCL builds one communicator over distinct devices: it cannot share one among nodes.
DEVICE_PER_NODE = {"nccl"}


def cpu_backends_here():
    """The cpu backends of the config that can run here (seed-cpp needs a C++ compiler)."""
    backends = config["cpu"]["backends"]
    return [b for b in backends if CXX.ok or b not in COMPILED_BACKENDS]


def compare_here():
    """The alternated-launch comparisons of the threaded ring with MPI_Allreduce (needs MPI)."""
    if not MPI.ok or "compare" not in config:
        return []
    return [
        f"results/compare/cpu_vs_mpi-allreduce_n{nodes}_{dtype}.csv"
        for nodes in config["mpi"]["nodes"]
        for dtype in sweep_settings("compare")["dtypes"]
    ]


def gpu_files_here():
    """GPU sweep results this machine can produce; with shared devices, only backends that
    can place several nodes on one device."""
    files = []
    for nodes in config["gpu"]["nodes"]:
        if gpu_shortfall(nodes) is None:
            backends = [
                backend
                for backend in config["gpu"]["backends"]
                if not (shares_devices(nodes) and backend in DEVICE_PER_NODE)
            ]
            files += sweep_files("gpu", [nodes], backends)
    return files


def profile_files(name):
    files = [
        f"results/profiles/{name}/{name}.nsys-rep",
        f"results/profiles/{name}/summary.md",
        f"results/profiles/{name}/tables",
    ]
    # The CPU profile comes with the profiler's measured overhead.
    return files + (["results/profiles/cpu/overhead.json"] if name == "cpu" else [])


def profile_possible(name):
    """Why profile `name` cannot be taken here, or None when it can."""
    missing = []
    if name in study_config.PROFILE_GPUS:
        shortfall = gpu_shortfall(study_config.PROFILE_GPUS[name])
        if shortfall:
            missing.append(shortfall)
    if not NSYS.ok:
        missing.append(f"{NSYS.why}; {NSYS_HINT}")
    return "; ".join(missing) or None


def profiles_here():
    return [
        name for name in config["nsys"]["profiles"] if profile_possible(name) is None
    ]


def sweeps_here():
    """Every sweep result this machine can produce, in the order the report lists them."""
    files = joint_sweep_files("cpu")
    if MPI.ok:
        files += joint_sweep_files("mpi")
    return files + gpu_files_here()


def kernel_bw_files():
    return [
        f"results/gpu/kernel_bw_{dtype}.csv"
        for dtype in sweep_settings("kernel_bw")["dtypes"]
    ]


def kernel_bw_here():
    return kernel_bw_files() if gpu_shortfall(1) is None else []


def not_measured():
    """What `all` leaves out on this machine, why, and the command that would produce it."""
    absent = []
    if not CXX.ok:
        for backend in sorted(COMPILED_BACKENDS & set(config["cpu"]["backends"])):
            absent.append(
                {
                    "what": f"CPU sweeps ({backend})",
                    "why": CXX.why,
                    "how": "with a C++20 compiler: snakemake --cores 8 cpu",
                }
            )
    if not MPI.ok:
        absent.append(
            {
                "what": "MPI sweeps (" + ", ".join(config["mpi"]["backends"]) + ")",
                "why": MPI.why,
                "how": f"{MPI_HINT}, then: snakemake --cores 8 mpi",
            }
        )
    for nodes in config["gpu"]["nodes"]:
        shortfall = gpu_shortfall(nodes)
        if shortfall:
            absent.append(
                {
                    "what": f"GPU sweeps at N = {nodes} ("
                    + ", ".join(config["gpu"]["backends"])
                    + ")",
                    "why": shortfall,
                    "how": f"on a machine with {nodes} GPUs: snakemake --cores 8 gpu",
                }
            )
        elif shares_devices(nodes):
            for backend in sorted(DEVICE_PER_NODE & set(config["gpu"]["backends"])):
                absent.append(
                    {
                        "what": f"GPU sweep at N = {nodes} ({backend})",
                        "why": f"{backend} needs one device per node, {GPUS_HOW}; "
                        "shared_devices applies to our ring only",
                        "how": f"on a machine with {nodes} GPUs: snakemake --cores 8 gpu",
                    }
                )
    shortfall = gpu_shortfall(1)
    if shortfall:
        absent.append(
            {
                "what": "reduction kernel bandwidth (one GPU)",
                "why": shortfall,
                "how": "on a machine with a GPU: snakemake --cores 8 kernel_bw",
            }
        )
    for name in config["nsys"]["profiles"]:
        why = profile_possible(name)
        if why:
            needs = (
                [f"{study_config.PROFILE_GPUS[name]} GPUs"]
                if name in study_config.PROFILE_GPUS
                else []
            )
            needs.append("nsys (sudo sh scripts/install_nsys.sh)")
            absent.append(
                {
                    "what": f"Nsight Systems profile {name}",
                    "why": why,
                    "how": f"on a machine with {' and '.join(needs)}: "
                    f"snakemake --cores 8 nsys_{name}",
                }
            )
    return absent


def all_inputs(wildcards):
    """Everything that does not need a piece this machine lacks, and the report."""
    files = sweeps_here() + kernel_bw_here() + compare_here()
    for name in profiles_here():
        files += profile_files(name)
    return files + [
        "results/report/not_measured.json",
        "results/report/index.html",
        "results/report/report.md",
    ]


# Named targets: each stops the run, before any job starts, when this machine lacks a piece.


def cpu_target(wildcards):
    if not CXX.ok and COMPILED_BACKENDS & set(config["cpu"]["backends"]):
        print(f"note: target cpu leaves out seed-cpp: {CXX.why}", file=sys.stderr)
    return joint_sweep_files("cpu")


def mpi_target(wildcards):
    if not MPI.ok:
        stop(f"target mpi: {MPI.why}; {MPI_HINT}")
    return joint_sweep_files("mpi")


def gpu_target(wildcards):
    for nodes in config["gpu"]["nodes"]:
        shortfall = gpu_shortfall(nodes)
        if shortfall:
            stop(f"target gpu: the sweep at N = {nodes} {shortfall}")
    return gpu_files_here()


def kernel_bw_target(wildcards):
    shortfall = gpu_shortfall(1)
    if shortfall:
        stop(f"target kernel_bw {shortfall}")
    return kernel_bw_files()


def nsys_target(name):
    def inputs(wildcards):
        why = profile_possible(name)
        if why:
            stop(f"target nsys_{name}: {why}")
        return profile_files(name)

    return inputs


# -- the report -----------------------------------------------------------------------------


def references_here():
    """The configured reference folders that exist here (a copy of the workflow without
    results/reference/ builds its report without them, and says so once)."""
    present = [path for path in config.get("references", []) if os.path.isdir(path)]
    absent = [path for path in config.get("references", []) if path not in present]
    if absent:
        print(
            f"ring: reference folder(s) {', '.join(absent)} absent: the report leaves them out",
            file=sys.stderr,
        )
    return present


def report_args(wildcards, input):
    """The result files of this run, as `python -m ring.report` takes them."""
    args = [f"--reference {path}" for path in input.references]
    args += [f"--sweep {path}" for path in input.sweeps]
    args += [f"--kernel-bw {path}" for path in input.kernel_bw]
    args += [f"--alternated {path}" for path in input.alternated]
    args += [f"--profile {os.path.dirname(path)}" for path in input.tables]
    args.append(f"--not-measured {input.not_measured}")
    return " ".join(args)


def figure_captions():
    """Figure name -> caption, as the report module words them (for `snakemake --report`)."""
    try:
        from ring.report.figures import FIGURES
    except ImportError:
        # Snakemake may run from an environment without the package (jobs then use
        # envs/analysis.yaml); the figures still carry the caption's generic part.
        return {}
    return {spec.name: spec.caption for spec in FIGURES}
