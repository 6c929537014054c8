"""Everything the figures and the report show, derived once from the loaded inputs."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from . import analysis, intervals, profiles, trust
from . import caveats as caveat_notes
from . import findings as finding_text
from .inputs import Inputs

__all__ = ["EXPECTED", "Expected", "Missing", "ReportModel"]


@dataclass(frozen=True)
class Expected:
    """A result the full study has, the workflow target that makes it, and what it needs."""

    key: str
    what: str
    target: str
    needs: str  # "" | "mpi" | "gpu" | "nsys" | "nsys+gpu"


# The workflow's named targets (``snakemake --cores 8 <target>``).
EXPECTED = (
    Expected("cpu pairwise", "CPU ring (threads), pairwise synchronisation", "cpu", ""),
    Expected("cpu barrier", "CPU ring (threads), barrier after every step", "cpu", ""),
    Expected("numpy-direct", "shared-memory optimum (one ufunc pass per chunk)", "cpu", ""),
    Expected("seed-cpp", "the original study's C++20 CPU ring (std::barrier)", "cpu", ""),
    Expected("mpi-allreduce", "MPI_Allreduce through mpi4py", "mpi", "mpi"),
    Expected("mpi", "the ring over MPI ranks", "mpi", "mpi"),
    Expected("gpu", "GPU ring (CuPy, one device per node)", "gpu", "gpu"),
    Expected("nccl", "NCCL allreduce", "gpu", "gpu"),
    Expected("kernel_bw", "single-GPU reduction-kernel bandwidth sweep", "kernel_bw", "gpu"),
    Expected("nsys_cpu", "Nsight Systems profile of the CPU ring", "nsys_cpu", "nsys"),
    Expected("nsys_2gpu", "Nsight Systems profile of the GPU ring, N = 2", "nsys_2gpu", "nsys+gpu"),
    Expected("nsys_4gpu", "Nsight Systems profile of the GPU ring, N = 4", "nsys_4gpu", "nsys+gpu"),
)
NSYS_INSTALL = "sudo sh scripts/install_nsys.sh"


@dataclass(frozen=True)
class Missing:
    what: str
    why: str
    command: str
    where: str = ""  # e.g. "on a machine with GPUs"


class ReportModel:
    """The derived tables; attributes are computed on first use."""

    def __init__(self, inputs: Inputs, alternated=()):
        self.inputs = inputs
        # Comparisons from alternated separate launches (ring.report.alternation).
        self.alternated = list(alternated)

    # --- rows and series --------------------------------------------------------------

    @cached_property
    def rows(self) -> pd.DataFrame:
        return analysis.label_series(self.inputs.sweep_rows())

    @cached_property
    def plot_rows(self) -> pd.DataFrame:
        """Rows a log-size axis can show (a 0-byte call has no place on it)."""
        return self.rows[self.rows["bytes"] > 0]

    @cached_property
    def backends(self) -> set[str]:
        return set(self.rows["backend"])

    def palette(self, sns) -> dict[str, tuple]:
        """One colour per series label, the same in every figure."""
        labels = sorted(set(self.rows["series"]))
        colours = sns.color_palette("tab10" if len(labels) <= 10 else "husl", len(labels))
        return dict(zip(labels, colours, strict=True))

    # --- comparisons ------------------------------------------------------------------

    @cached_property
    def comparisons(self) -> list[analysis.Comparison]:
        return analysis.comparisons(self.rows)

    def comparison(self, name: str) -> analysis.Comparison | None:
        return next((c for c in self.comparisons if c.name == name), None)

    @cached_property
    def comparison_summaries(self) -> list[tuple[analysis.Comparison, pd.DataFrame]]:
        return [(c, analysis.summarise_comparison(c)) for c in self.comparisons]

    @cached_property
    def one_run_ratios(self) -> pd.DataFrame:
        """Ring-over-peer speedups from one run, per size, with bootstrap intervals."""
        return intervals.one_run_ratios(self)

    @cached_property
    def findings(self) -> list[str]:
        return finding_text.findings(self)

    @cached_property
    def scaling(self) -> pd.DataFrame:
        return analysis.scaling(self.rows)

    @cached_property
    def scaling_at_largest(self) -> pd.DataFrame:
        table = self.scaling
        if table.empty:
            return table
        index = table.groupby(["series", "nodes_a", "nodes_b"])["bytes"].idxmax()
        return table.loc[index.values].reset_index(drop=True)

    # --- bandwidth and ceilings -------------------------------------------------------

    @cached_property
    def busbw_at_largest(self) -> pd.DataFrame:
        return analysis.busbw_at_largest(self.rows)

    @cached_property
    def ceilings(self) -> pd.DataFrame:
        return analysis.all_ceilings(self.inputs)

    @cached_property
    def ceiling_fractions(self) -> pd.DataFrame:
        llc = {run.name: trust.llc_bytes(run) for run in self.inputs.runs}
        return analysis.ceiling_fractions(self.rows, self.ceilings, llc)

    # --- kernel bandwidth -------------------------------------------------------------

    @cached_property
    def kernel_summary(self) -> pd.DataFrame:
        """Per kernel sweep, device and kernel (ours, CuPy's ufunc; sweeps before the
        ``kernel`` column measured the ufunc): kernel against copy at the largest size, and
        best."""
        records = []
        for result in self.inputs.kernel_bandwidth:
            rows = result.rows.dropna(subset=["kernel_GBps", "copy_GBps"])
            rows = rows[rows["copy_GBps"] > 0]
            rows = rows.assign(
                device=rows["device"].astype(str) if "device" in rows else "",
                kernel=rows["kernel"].astype(str) if "kernel" in rows else "ufunc",
            )
            for (device, kernel), part in rows.groupby(["device", "kernel"], sort=True):
                if part.empty:
                    continue
                ratio = part["kernel_GBps"] / part["copy_GBps"]
                last = part.loc[part["bytes"].idxmax()]
                best = ratio.idxmax()
                records.append(
                    {
                        "run": result.name,
                        "device": str(device),
                        "kernel": kernel,
                        "largest_bytes": int(last["bytes"]),
                        "kernel_GBps": float(last["kernel_GBps"]),
                        "copy_GBps": float(last["copy_GBps"]),
                        "ratio_at_largest": float(last["kernel_GBps"] / last["copy_GBps"]),
                        "max_ratio": float(ratio[best]),
                        "max_at_bytes": int(part.at[best, "bytes"]),
                    }
                )
        return pd.DataFrame.from_records(records)

    @cached_property
    def kernel_ceilings(self) -> pd.DataFrame:
        frames = []
        for result in self.inputs.kernel_bandwidth:
            leaves = analysis.flatten_ceilings(result.meta.get("ceilings") or {})
            frames.append(
                pd.DataFrame(
                    {
                        "run": result.name,
                        "ceiling": [n for n, _ in leaves],
                        "GBps": [float("nan") if v is None else v for _, v in leaves],
                        "device": True,
                        "link": False,
                    },
                    columns=["run", "ceiling", "GBps", "device", "link"],
                )
            )
        if not frames:
            return pd.DataFrame(columns=["run", "ceiling", "GBps", "device", "link"])
        return pd.concat(frames, ignore_index=True)

    # --- profiles ---------------------------------------------------------------------

    @cached_property
    def _profile_figures(self):
        return profiles.step_and_wait_tables(self.inputs.profiles)

    @property
    def profile_steps(self) -> pd.DataFrame | None:
        return self._profile_figures[0]

    @property
    def profile_waits(self) -> pd.DataFrame | None:
        return self._profile_figures[1]

    @property
    def profile_steps_missing(self) -> str:
        if not self.inputs.profiles:
            return "no Nsight Systems profile given"
        return "the profiles hold no per-step NVTX ranges"

    # --- what the data does not cover -------------------------------------------------

    def _hosts(self) -> str:
        hosts = sorted({str(run.environment.get("host")) for run in self.inputs.local_runs()})
        return ", ".join(hosts)

    @property
    def _local_names(self) -> set[str]:
        return {run.name for run in self.inputs.local_runs()}

    def _no_gpu_anywhere(self) -> bool:
        local = self.rows[self.rows["run"].isin(self._local_names)]
        if set(local["backend"]) & set(analysis.DEVICE_BACKENDS) or self._local_kernels():
            return False
        return all(not run.environment.get("gpus") for run in self.inputs.local_runs())

    def _no_mpi_anywhere(self) -> bool:
        return all(not run.environment.get("mpi_library") for run in self.inputs.local_runs())

    def _local_kernels(self) -> list:
        # A reference measured elsewhere does not make this machine's result present.
        return [k for k in self.inputs.kernel_bandwidth if not k.machine]

    def _present(self, expected: Expected) -> bool:
        if expected.key == "kernel_bw":
            return bool(self._local_kernels())
        if expected.key.startswith("nsys_"):
            return any(
                profiles.profile_kind(p.name) == expected.key
                for p in self.inputs.profiles
                if not p.machine
            )
        backend, _, sync = expected.key.partition(" ")
        rows = self.rows[self.rows["run"].isin(self._local_names)]
        rows = rows[rows["backend"] == backend]
        if sync:
            rows = rows[rows["sync"] == sync]
        return not rows.empty

    def _why_missing(self, expected: Expected) -> str:
        local = self.inputs.local_runs()
        count = len(local)
        files = local[0].json_path.name if count == 1 else f"all {count} result JSONs"
        reasons = []
        if "gpu" in expected.needs and self._no_gpu_anywhere():
            reasons.append(f"no GPU on {self._hosts()} (`environment.gpus` is empty in {files})")
        if expected.needs == "mpi" and self._no_mpi_anywhere():
            reasons.append(
                f"no MPI library recorded on {self._hosts()} "
                f"(`environment.mpi_library` is null in {files})"
            )
        if "nsys" in expected.needs:
            reasons.append(
                "no profile was given to the report; profiling needs Nsight Systems "
                f"(`nsys`; on Debian: `{NSYS_INSTALL}`)"
            )
        if not reasons:
            reasons.append("no result file for it was given to the report")
        return "; ".join(reasons)

    @cached_property
    def not_measured(self) -> list[Missing]:
        """What the workflow left out (its record), then what else the inputs lack."""
        missing = []
        covered: set[str] = set()
        for entry in self.inputs.left_out or ():
            where, command = _split_how(entry.how)
            if command:
                covered.add(command.split()[-1])
            missing.append(Missing(entry.what, entry.why, command, where))
        for expected in EXPECTED:
            if self._present(expected) or expected.target in covered:
                continue
            missing.append(
                Missing(
                    expected.what,
                    self._why_missing(expected),
                    f"snakemake --cores 8 {expected.target}",
                    "on a machine with GPUs" if "gpu" in expected.needs else "",
                )
            )
        for run in self.inputs.runs:
            for name, value in analysis.flatten_ceilings(run.ceilings):
                if value is None:
                    missing.append(
                        Missing(
                            f"ceiling {name} of {run.name}",
                            f"null in {run.json_path.name} (the run could not measure it)",
                            f"snakemake --cores 8 {_target_of(run)}",
                            "where the ceiling can be measured",
                        )
                    )
        return missing

    # --- caveats ----------------------------------------------------------------------

    @cached_property
    def caveats(self) -> list[str]:
        return caveat_notes.caveats(self)


def _split_how(how: str) -> tuple[str, str]:
    """``"on a machine with 2 GPUs: snakemake --cores 8 gpu"`` -> (where, command)."""
    start = how.find("snakemake ")
    if start < 0:
        return how, ""
    return how[:start].strip().rstrip(":").strip(), how[start:].strip()


def _target_of(run) -> str:
    """The workflow target that writes a run's results (its folder under results/)."""
    folder = run.csv_path.parent.name
    return folder if folder in {e.target for e in EXPECTED} else "all"
