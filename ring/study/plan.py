"""The study on this machine: which result files `all` and each target ask for, and the
harness flags of every sweep and profile.  Nothing here measures anything."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from .config import (
    algorithm_settings,
    confirm_settings,
    profile_nodes,
    results_dir,
    sweep_settings,
)
from .hosts import hosts_files, hosts_fit_file, hosts_in_all
from .machine import Machine
from .targets import COMPILED_BACKENDS, DEVICE_PER_NODE, NSYS_HINT, PROFILE_GPUS

__all__ = [
    "Study",
    "algorithms_stem",
    "compare_stem",
    "confirm_stem",
    "finalists_stem",
    "gpu_stem",
    "kernel_bw_stem",
    "original_stem",
    "run_stem",
    "sweep_stem",
]

# Where each result goes under the configuration's results folder, without the suffix:
# FILE.csv, FILE.json and FILE.samples.csv share the stem, logs/FILE.log is the run's log.
# The defaults are Snakemake's wildcards, so the rules (workflow/rules/*.smk) and the file
# lists of Study spell every path here and nowhere else.


def run_stem(
    kind: str, run: object = "{run}", nodes: object = "{nodes}", dtype: object = "{dtype}"
) -> str:
    """One harness run of a kind (cpu, mpi, gpu) per N: `sweep`, `algorithms`, `original`."""
    return f"{kind}/{run}_n{nodes}_{dtype}"


def sweep_stem(kind: str, nodes: object = "{nodes}", dtype: object = "{dtype}") -> str:
    """CPU and MPI: one run per N holding every backend of the kind."""
    return run_stem(kind, "sweep", nodes, dtype)


def algorithms_stem(kind: str, nodes: object = "{nodes}", dtype: object = "{dtype}") -> str:
    """Every algorithm of the kind's ring backend, one run per N."""
    return run_stem(kind, "algorithms", nodes, dtype)


def finalists_stem(kind: str, nodes: object = "{nodes}", dtype: object = "{dtype}") -> str:
    """The series the algorithm run (the screen) picked, to confirm (FILE.json)."""
    return f"{kind}/finalists_n{nodes}_{dtype}"


def confirm_stem(kind: str, nodes: object = "{nodes}", dtype: object = "{dtype}") -> str:
    """The screen's picks and the peers, in alternated launches (a launch set)."""
    return f"{kind}/confirm_n{nodes}_{dtype}"


def original_stem(nodes: object = "{nodes}", dtype: object = "{dtype}") -> str:
    """The CPU ring and its peers at the original study's own size."""
    return run_stem("cpu", "original", nodes, dtype)


def gpu_stem(
    backend: object = "{backend}", nodes: object = "{nodes}", dtype: object = "{dtype}"
) -> str:
    """GPU: one run per backend and N."""
    return f"gpu/{backend}_n{nodes}_{dtype}"


def compare_stem(nodes: object = "{nodes}", dtype: object = "{dtype}") -> str:
    """The threaded ring and MPI_Allreduce, alternated launches."""
    return f"compare/cpu_vs_mpi-allreduce_n{nodes}_{dtype}"


def kernel_bw_stem(dtype: object = "{dtype}") -> str:
    """The single-GPU reduction-kernel bandwidth sweep."""
    return f"gpu/kernel_bw_{dtype}"


class Study:
    """A checked configuration and the machine it runs on."""

    def __init__(self, config: Mapping, machine: Machine):
        self.config = config
        self.machine = machine
        # `--config shared_devices=true` gives the string "true" (Snakemake turns only True
        # into a bool); the schema allows both spellings.
        self.shared_devices = config["shared_devices"] in (True, "true")
        self.results = results_dir(config)  # results/<name>/ of a named configuration

    def path(self, relative: str) -> str:
        """Where a result file of this configuration goes."""
        return f"{self.results}/{relative}"

    # -- devices ------------------------------------------------------------------------

    def gpu_shortfall(self, nodes: int) -> str | None:
        """Why a GPU job over `nodes` nodes cannot run here, or None when it can."""
        gpus = self.machine.gpus
        if gpus >= nodes or (gpus >= 1 and self.shared_devices):
            return None
        needed = f"needs {nodes} GPU{'s' if nodes > 1 else ''}, {self.machine.gpus_how}"
        if gpus >= 1:
            return f"{needed}; set shared_devices: true to place several nodes on one device"
        return needed

    def devices_for(self, nodes: int) -> int:
        """GPUs a job over `nodes` nodes occupies (fewer than nodes only with shared_devices)."""
        return max(1, min(nodes, self.machine.gpus))

    def shares_devices(self, nodes: int) -> bool:
        return self.devices_for(nodes) < nodes

    # -- harness flags ------------------------------------------------------------------

    def sweep_args(self, kind: str) -> str:
        """The harness flags of a `kind` sweep, in nccl-tests' vocabulary: the cpu and mpi
        sweeps time every size out of place too (the report's nccl-tests tables)."""
        out_of_place = kind in ("cpu", "mpi")
        args = self._sweep_flags(kind, sweep_settings(self.config, kind), out_of_place)
        if "sync" in self.config[kind]:
            args.append(f"--sync {','.join(self.config[kind]['sync'])}")
        return " ".join(args)

    def run_args(self, kind: str, run: str) -> str:
        """Every harness flag of one run of the cpu or mpi kind but N, dtype and --out: its
        backends, then the `sweep`'s, the `algorithms` screen's or (cpu) the `original`
        size's flags."""
        backends = self.cpu_backends_here() if kind == "cpu" else self.config[kind]["backends"]
        flags = {
            "sweep": self.sweep_args,
            "algorithms": self.algorithm_args,
            "original": lambda _: self.original_args(),
        }[run](kind)
        return f"--backend {','.join(backends)} {flags}"

    def gpu_run_args(self, run: str) -> str:
        """Every harness flag of one GPU run but N, dtype, shared devices and --out: a
        backend's sweep (`run` names it: gpu, nccl), or `algorithms`, the GPU ring's
        algorithm sweep."""
        if run == "algorithms":
            return f"--backend gpu {self.algorithm_args('gpu')}"
        return f"--backend {run} {self.sweep_args('gpu')}"

    def confirm_args(self, kind: str) -> str:
        """The harness flags of each confirmation launch: the screen's (the finalists name
        series by them), with the `confirm` section's iterations and rounds."""
        return self.algorithm_args(kind, confirm_settings(self.config, kind))

    def original_args(self) -> str:
        """The CPU run at the original study's own size: a few calls of our ring (both
        executors), the original's design (seed-cpp) and numpy-direct, in place."""
        section = self.config["original"]
        size = section["bytes"]
        settings = {**sweep_settings(self.config, "cpu"), "min_bytes": size, "max_bytes": size}
        settings.update({key: section[key] for key in ("iters", "warmup") if key in section})
        args = self._sweep_flags("cpu", settings)
        args.append(f"--sync {self.config['cpu']['sync'][0]} --executor nodes,slices")
        return " ".join(args)

    def algorithm_args(self, kind: str, settings: Mapping | None = None) -> str:
        """The harness flags of `kind`'s algorithm sweep (the screen): every configured
        algorithm of the kind's ring backend in one run (so their times compare within it),
        one sync mode, for cpu each configured executor and for mpi each configured kind of
        buffers; `settings`: other sweep settings than the section's (the confirmation's)."""
        section = self.config["algorithms"]
        settings = algorithm_settings(self.config, kind) if settings is None else settings
        args = self._sweep_flags(kind, settings)
        args.append(f"--algorithm {','.join(section['names'])}")
        rounds = min(int(settings.get("rounds", section.get("rounds", 1))), int(settings["iters"]))
        if rounds > 1:  # a short sweep (CI's iters) takes as many rounds as it has calls
            args.append(f"--rounds {rounds}")
        if "sync" in self.config[kind]:
            args.append(f"--sync {section.get('sync', self.config[kind]['sync'][0])}")
        if kind == "cpu" and "executors" in section:  # a flag of the cpu backend alone
            args.append(f"--executor {','.join(section['executors'])}")
        if kind == "mpi" and "buffers" in section:  # of the MPI backends alone
            args.append(f"--buffers {','.join(section['buffers'])}")
        return " ".join(args)

    def hosts_args(self) -> str:
        """The harness flags of every run across emulated hosts but N, dtype and --out:
        the MPI backends (our ring and MPI_Allreduce), every configured algorithm, in place."""
        args = self._sweep_flags("hosts", sweep_settings(self.config, "hosts"))
        args.append(f"--algorithm {','.join(self.config['hosts']['algorithms'])}")
        return f"--backend {','.join(self.config['mpi']['backends'])} {' '.join(args)}"

    def _sweep_flags(self, kind: str, s: Mapping, out_of_place: bool = False) -> list[str]:
        args = [
            *(f"-b {s['min_bytes']}", f"-e {s['max_bytes']}", f"-f {s['step_factor']}"),
            *(f"-n {s['iters']}", f"-w {s['warmup']}", f"-c {s['check']}"),
            *(f"-o {s['op']}", f"--seed {s['seed']}"),
        ]
        if kind != "kernel_bw":  # one process on one GPU: no peer to leave waiting
            args.append(f"--timeout {s['timeout']}")
            # A call lasts as long as its slowest rank (the harness's nccl-tests default
            # is the average); in place as the library reduces, out of place too where
            # `out_of_place` asks for nccl-tests' two groups.
            args.append(f"-a 3 --out-of-place {int(out_of_place)}")
        return args

    def profile_args(self, name: str) -> str:
        """The harness flags of the fixed bench run that profile `name` wraps."""
        p = self.config["nsys"]["profiles"][name]
        nodes = profile_nodes(self.config, name)
        bench = self.config["bench"]
        args = [
            *(f"--backend {p['backend']}", f"--nodes {nodes}"),
            *(f"-b {p['bytes']}", f"-e {p['bytes']}", f"-n {p['iters']}", f"-w {p['warmup']}"),
            *(f"-d {p.get('dtype', bench['dtypes'][0])}", f"-o {bench['op']}"),
            f"--seed {bench['seed']}",
            "--out-of-place 0",  # the profile explains the in-place call alone
        ]
        if "sync" in p:
            args.append(f"--sync {p['sync']}")
        if p["backend"] == "gpu":
            args.append(self.shared_flag(nodes))
            # The profile explains the steps through their NVTX ranges, which only an eager
            # call has: a replayed CUDA graph enqueues no step from the host.
            args.append("--graphs 0")
        return " ".join(arg for arg in args if arg)

    def shared_flag(self, nodes: int) -> str:
        """The harness flag that lets `nodes` nodes share fewer GPUs."""
        return "--shared-devices 1" if self.shares_devices(nodes) else ""

    def mpi_machines(self, nodes: int) -> int | None:
        """SLURM's `nodes` (machines) of an MPI sweep: one per rank when the config asks for
        it, else None, leaving the placement of the ranks to the cluster."""
        return nodes if self.config["mpi"].get("one_rank_per_machine", False) else None

    # -- result files -------------------------------------------------------------------

    def _dtypes(self, kind: str) -> list[str]:
        return sweep_settings(self.config, kind)["dtypes"]

    def joint_sweep_files(self, kind: str) -> list[str]:
        """CPU and MPI: one file per node count holding every backend of the kind."""
        return [
            self.path(f"{sweep_stem(kind, nodes, dtype)}.csv")
            for nodes in self.config[kind]["nodes"]
            for dtype in self._dtypes(kind)
        ]

    def cpu_backends_here(self) -> list[str]:
        """The cpu backends of the config that can run here (seed-cpp needs a compiler)."""
        backends = self.config["cpu"]["backends"]
        return [b for b in backends if self.machine.cxx.ok or b not in COMPILED_BACKENDS]

    def compare_here(self) -> list[str]:
        """The alternated launches of the threaded ring and MPI_Allreduce (needs MPI)."""
        if not self.machine.mpi.ok or "compare" not in self.config:
            return []
        return [
            self.path(f"{compare_stem(nodes, dtype)}.csv")
            for nodes in self.config["mpi"]["nodes"]
            for dtype in self._dtypes("compare")
        ]

    def gpu_files_here(self) -> list[str]:
        """GPU sweep results this machine can produce; with shared devices, only backends
        that can place several nodes on one device."""
        return [
            self.path(f"{gpu_stem(backend, nodes, dtype)}.csv")
            for nodes in self.config["gpu"]["nodes"]
            if self.gpu_shortfall(nodes) is None
            for backend in self.config["gpu"]["backends"]
            if not (self.shares_devices(nodes) and backend in DEVICE_PER_NODE)
            for dtype in self._dtypes("gpu")
        ]

    def algorithm_files(self, kind: str) -> list[str]:
        """`kind`'s algorithm sweep, one file per N (none unless the config asks for it)."""
        section = self.config.get("algorithms")
        if not section or kind not in section["kinds"]:
            return []
        return [
            self.path(f"{algorithms_stem(kind, nodes, dtype)}.csv")
            for nodes in self.config[kind]["nodes"]
            if kind != "gpu" or self.gpu_shortfall(nodes) is None
            for dtype in algorithm_settings(self.config, kind)["dtypes"]
        ]

    def confirm_nodes(self, kind: str) -> list[int]:
        """The N of `kind` whose screens are confirmed (none without the sections)."""
        if "confirm" not in self.config or not self.algorithm_files(kind) or kind == "gpu":
            return []
        return [n for n in self.config["confirm"]["nodes"] if n in self.config[kind]["nodes"]]

    def confirm_files(self, kind: str) -> list[str]:
        """`kind`'s confirmation launch sets, one per confirmed N."""
        return [
            self.path(f"{confirm_stem(kind, nodes, dtype)}.csv")
            for nodes in self.confirm_nodes(kind)
            for dtype in confirm_settings(self.config, kind)["dtypes"]
        ]

    def original_files(self) -> list[str]:
        """The CPU runs at the original study's own size (none without the section)."""
        if "original" not in self.config:
            return []
        dtype = sweep_settings(self.config, "cpu")["dtypes"][0]
        return [
            self.path(f"{original_stem(n, dtype)}.csv") for n in self.config["original"]["nodes"]
        ]

    def kind_files(self, kind: str) -> list[str]:
        """Every result of the cpu or mpi kind: sweeps, screens, confirmations and (cpu)
        the original study's size."""
        files = self.joint_sweep_files(kind) + self.algorithm_files(kind)
        files += self.confirm_files(kind)
        return files + (self.original_files() if kind == "cpu" else [])

    def sweeps_here(self) -> list[str]:
        """Every single-launch result this machine can produce, in the order the report
        lists them (the confirmations are :meth:`confirmations_here`)."""
        files = self.joint_sweep_files("cpu") + self.algorithm_files("cpu") + self.original_files()
        if self.machine.mpi.ok:
            files += self.joint_sweep_files("mpi") + self.algorithm_files("mpi")
        return files + self.gpu_files_here() + self.algorithm_files("gpu")

    def fits_here(self) -> list[str]:
        """The model fitted to each kind's screens, of the kinds this machine screens."""
        kinds = ["cpu", *(["mpi"] if self.machine.mpi.ok else [])]
        return [self.path(f"{kind}/model_fit.json") for kind in kinds if self.algorithm_files(kind)]

    def confirmations_here(self) -> list[str]:
        """Every confirmation launch set this machine can produce."""
        files = self.confirm_files("cpu")
        return files + (self.confirm_files("mpi") if self.machine.mpi.ok else [])

    def kernel_bw_files(self) -> list[str]:
        return [self.path(f"{kernel_bw_stem(dtype)}.csv") for dtype in self._dtypes("kernel_bw")]

    def kernel_bw_here(self) -> list[str]:
        return self.kernel_bw_files() if self.gpu_shortfall(1) is None else []

    def profile_dir(self, name: str) -> str:
        return self.path(f"profiles/{name}")

    def profile_files(self, name: str) -> list[str]:
        folder = self.profile_dir(name)
        files = [f"{folder}/{name}.nsys-rep", f"{folder}/summary.md", f"{folder}/tables"]
        # The CPU profile comes with the profiler's measured overhead.
        return files + ([f"{folder}/overhead.json"] if name == "cpu" else [])

    def profile_possible(self, name: str) -> str | None:
        """Why profile `name` cannot be taken here, or None when it can."""
        missing = []
        if name in PROFILE_GPUS:
            shortfall = self.gpu_shortfall(PROFILE_GPUS[name])
            if shortfall:
                missing.append(shortfall)
        if not self.machine.nsys.ok:
            missing.append(f"{self.machine.nsys.why}; {NSYS_HINT}")
        return "; ".join(missing) or None

    def profiles_here(self) -> list[str]:
        names = self.config["nsys"]["profiles"]
        return [name for name in names if self.profile_possible(name) is None]

    def references_here(self) -> list[str]:
        """The configured reference folders that exist here (a copy of the workflow without
        results/reference/ builds its report without them, and says so once)."""
        wanted = self.config.get("references", [])
        present = [path for path in wanted if os.path.isdir(path)]
        absent = [path for path in wanted if path not in present]
        if absent:
            print(
                f"ring: reference folder(s) {', '.join(absent)} absent: the report leaves them out",
                file=sys.stderr,
            )
        return present

    def hosts_in_all(self) -> bool:
        return hosts_in_all(self.config)

    def hosts_files(self) -> list[str]:
        """The runs across emulated hosts and the model fitted to them (the `hosts` target)."""
        runs = hosts_files(self.config, self.results)
        return [*runs, hosts_fit_file(self.results)] if runs else []

    def hosts_here(self) -> list[str]:
        """The model across hosts for the report: when `all` makes it, or a `hosts` run
        already has (making hosts needs root, so `all` does not unless asked)."""
        fit = hosts_fit_file(self.results)
        wanted = hosts_in_all(self.config) or os.path.isfile(fit)
        return [fit] if wanted and self.hosts_files() else []

    def report_files(self) -> list[str]:
        return [self.path(f"report/{name}") for name in ("index.html", "report.md")]

    def all_files(self) -> list[str]:
        """Everything that does not need a piece this machine lacks, and the report."""
        files = self.sweeps_here() + self.confirmations_here()
        files += self.kernel_bw_here() + self.compare_here()
        for name in self.profiles_here():
            files += self.profile_files(name)
        files += self.hosts_files() if self.hosts_in_all() else []
        return [*files, self.path("report/not_measured.json"), *self.report_files()]
