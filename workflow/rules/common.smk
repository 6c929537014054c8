# Shared by every stage: the study on this machine (ring.study: what it offers, the files
# each target asks for, the harness flags) and the input functions of the rules. Everything
# here runs once, when the DAG is built; nothing here measures anything.

import os
import sys

from ring.study import Study, algorithms_stem, compare_stem, confirm_stem
from ring.study import finalists_stem, gpu_stem, job_environment, kernel_bw_stem
from ring.study import left_out, probe_machine, run_stem
from ring.study.hosts import hosts_shortfall
from ring.study.targets import MPI_HINT, PROFILE_GPUS

# Jobs run in the project's environment: Snakemake's own, else .venv, else --sdm conda's
# (set first: the probes below ask the jobs' Python for mpi4py).
DEPLOYMENT = {method.name for method in workflow.deployment_settings.deployment_method}
job_environment("CONDA" in DEPLOYMENT)
STUDY = Study(config, probe_machine(config))
MACHINE = STUDY.machine
# results/, or results/<name>/ for a named configuration (variants keep their own files).
RESULTS = STUDY.results


wildcard_constraints:
    nodes=r"\d+",
    dtype=r"[a-z]+[0-9]+",


def stop(message):
    """End the run before any job starts, with one line on stderr and exit status 1."""
    sys.exit(f"error: {message}")


def nodes_of(wildcards):
    return int(wildcards.nodes)


# -- inputs of `all` and the named targets ----------------------------------------------------
# Each named target stops the run, before any job starts, when this machine lacks a piece.


def all_inputs(wildcards):
    if STUDY.hosts_in_all():  # stops here where hosts cannot run, as the target does
        hosts_target(wildcards)
    return STUDY.all_files()


def cpu_target(wildcards):
    if STUDY.cpu_backends_here() != config["cpu"]["backends"]:
        print(
            f"note: target cpu leaves out seed-cpp: {MACHINE.cxx.why}", file=sys.stderr
        )
    return STUDY.kind_files("cpu")


def mpi_target(wildcards):
    if not MACHINE.mpi.ok:
        stop(f"target mpi: {MACHINE.mpi.why}; {MPI_HINT}")
    return STUDY.kind_files("mpi")


def hosts_target(wildcards):
    shortfall = hosts_shortfall(config, MACHINE.mpi)
    if shortfall:
        stop(f"target hosts: {shortfall}")
    return STUDY.hosts_files()


def gpu_target(wildcards):
    for nodes in config["gpu"]["nodes"]:
        shortfall = STUDY.gpu_shortfall(nodes)
        if shortfall:
            stop(f"target gpu: the sweep at N = {nodes} {shortfall}")
    return STUDY.gpu_files_here() + STUDY.algorithm_files("gpu")


def kernel_bw_target(wildcards):
    shortfall = STUDY.gpu_shortfall(1)
    if shortfall:
        stop(f"target kernel_bw {shortfall}")
    return STUDY.kernel_bw_files()


def nsys_target(name):
    def inputs(wildcards):
        why = STUDY.profile_possible(name)
        if why:
            stop(f"target nsys_{name}: {why}")
        return STUDY.profile_files(name)

    return inputs


# -- the report -------------------------------------------------------------------------------


def report_args(wildcards, input):
    """The result files of this run, as `python -m ring.report` takes them."""
    flags = {"--reference": input.references, "--sweep": input.sweeps}
    flags.update({"--fit": input.fits, "--confirm": input.confirmations})
    flags.update({"--kernel-bw": input.kernel_bw, "--alternated": input.alternated})
    flags["--hosts"] = input.hosts  # the model across emulated hosts, where it exists
    args = [f"{flag} {path}" for flag, paths in flags.items() for path in paths]
    args += [f"--profile {os.path.dirname(path)}" for path in input.tables]
    args.append(f"--not-measured {input.not_measured}")
    return " ".join(args)


def figure_captions():
    """Figure name -> caption, as the report module words them (for `snakemake --report`)."""
    try:
        from ring.report.draw.specs import FIGURES
    except ImportError:
        # Snakemake may run from an environment without the package (jobs then use
        # envs/analysis.yaml); the figures still carry the caption's generic part.
        return {}
    return {spec.name: spec.caption for spec in FIGURES}
