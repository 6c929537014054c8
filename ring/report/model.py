"""Everything the figures and the report show, derived once from the loaded inputs."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pandas as pd

from . import analysis, profiles
from .fmt import format_bytes, format_number
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

    def __init__(self, inputs: Inputs):
        self.inputs = inputs

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
        return analysis.ceiling_fractions(self.rows, self.ceilings)

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

    def _above_ceiling(self) -> list[str]:
        """Points faster than a ceiling: their buffers fit a cache the ceiling's did not."""
        fractions = self.ceiling_fractions
        above = fractions[fractions["max_fraction"] > 1]
        if above.empty:
            return []
        worst = above.loc[above.groupby(["series", "nodes"])["max_fraction"].idxmax()]
        described = "; ".join(
            f"{r.series} N={r.nodes}: {format_number(100 * r.max_fraction)} % of {r.ceiling} "
            f"at {format_bytes(r.max_at_bytes)}"
            for r in worst.itertuples()
        )
        runs = set(self.rows.loc[self.rows["series"].isin(set(above["series"])), "run"])
        size = _first_buffer_size(self.inputs.runs, runs)
        largest_point = int((worst["nodes"] * worst["max_at_bytes"]).max())
        if size and largest_point < size:
            why = (
                f"The ceilings were measured on {format_bytes(size)} buffers; all N buffers of "
                f"these points together hold at most {format_bytes(largest_point)}, little "
                "enough for the CPU caches to serve them. Read fractions above 100 % as cache "
                "effects, not as beating memory."
            )
        else:
            why = (
                "Read fractions above 100 % as a ceiling measurement disturbed by other load "
                "or as cache effects, not as beating memory."
            )
        return [f"Some points move memory faster than a ceiling of their run ({described}). {why}"]

    @cached_property
    def caveats(self) -> list[str]:
        notes = []
        rows = self.rows
        for result in self.inputs.kernel_bandwidth:
            if "wrong" in result.rows and (result.rows["wrong"] > 0).any():
                bad = result.rows[result.rows["wrong"] > 0]
                notes.append(
                    f"**Wrong results.** The kernel sweep {result.name} has {len(bad)} size(s) "
                    "whose first launch failed validation; its throughput there describes a "
                    "wrong kernel."
                )
        wrong = rows[rows["wrong"] > 0]
        if not wrong.empty:
            points = "; ".join(
                f"{r.series} N={r.nodes} at {format_bytes(r.bytes)}: {r.wrong} wrong"
                for r in wrong.itertuples()
            )
            notes.append(
                f"**Wrong results.** {len(wrong)} point(s) failed validation, so their runs "
                f"failed and their times do not describe a correct allreduce: {points}."
            )
        for run in self.inputs.runs:
            config = run.meta.get("config") or {}
            if config.get("check") in (0, False):
                notes.append(
                    f"Run {run.name} was not validated (`-c 0`): its `wrong` column is 0 "
                    "because nothing was checked."
                )
        gpu_vs_cpu = self.comparison("gpu_vs_cpu")
        if gpu_vs_cpu is not None and gpu_vs_cpu.cross_nodes:
            pairs = gpu_vs_cpu.table[
                gpu_vs_cpu.table["nodes_fast"] != gpu_vs_cpu.table["nodes_slow"]
            ][["nodes_fast", "nodes_slow"]].drop_duplicates()
            described = ", ".join(
                f"GPU N={a} with CPU N={b} (busbw factors "
                f"{format_number(analysis.busbw_factor(a))} and "
                f"{format_number(analysis.busbw_factor(b))})"
                for a, b in pairs.itertuples(index=False)
            )
            notes.append(
                "GPU and CPU series were measured at different N, so the GPU/CPU comparison "
                f"pairs {described}: their bandwidths are not comparable, compare wall-clock "
                "time (the speedups here are time ratios)."
            )
        node_sets = rows.groupby("backend")["nodes"].agg(lambda s: tuple(sorted(set(s))))
        if node_sets.nunique() > 1:
            described = "; ".join(
                f"{backend}: N = {', '.join(map(str, counts))}"
                for backend, counts in node_sets.items()
            )
            notes.append(
                f"Backends were measured at different node counts ({described}); across "
                "different N compare wall-clock time, not busbw."
            )
        shared = rows[rows["shared_devices"] & rows["backend"].isin(analysis.DEVICE_BACKENDS)]
        if not shared.empty:
            described = []
            for run_name, part in shared.groupby("run"):
                run = next(r for r in self.inputs.runs if r.name == run_name)
                devices = len(run.environment.get("gpus") or [])
                counts = ", ".join(map(str, sorted(set(part["nodes"]))))
                described.append(f"{run_name}: N = {counts} on {devices} GPU(s)")
            notes.append(
                "Series labelled *(shared devices)* ran several logical nodes on one GPU "
                f"({'; '.join(described)}): transfers between nodes on the same device are "
                "device-local copies, not peer-to-peer links, so their busbw is not a link "
                "bandwidth; read them against the device copy ceiling."
            )
        one_host = rows[rows["shared_devices"] & rows["backend"].isin(analysis.MPI_BACKENDS)]
        if not one_host.empty:
            notes.append(
                "Series labelled *(one host)* ran all MPI ranks on one machine: their messages "
                "went through shared memory, not a network."
            )
        threads = sorted(set(rows["backend"]) & {"cpu", "numpy-direct", "seed-cpp"})
        if threads:
            named = ", ".join(threads[:-1]) + " and " * (len(threads) > 1) + threads[-1]
            notes.append(
                f"{named} run(s) as threads sharing one memory: no link is "
                "involved, so busbw is the nccl-tests formula only; the schedule's memory "
                "traffic against the copy and add ceilings of the same run is the honest "
                "measure."
            )
        # Hosts of different machines may share a name ("vm"): a reference says its machine.
        hosts = {run.machine or str(run.environment.get("host")) for run in self.inputs.runs}
        cross_run = [
            c.name for c in self.comparisons if (c.table["run_fast"] != c.table["run_slow"]).any()
        ]
        if len(hosts) > 1:
            notes.append(
                f"The runs come from different machines ({', '.join(sorted(hosts))}); ratios "
                "between runs of different machines compare machines as well as "
                "implementations, each measured in its own run."
            )
        if cross_run:
            notes.append(
                "Some speedups pair series from different runs "
                f"({', '.join(cross_run)}); absolute times drift between runs on a shared "
                "machine, so these ratios are less certain than those within one run."
            )
        noisy = rows[(rows["bytes"] >= 1 << 20) & (rows["time_us"] > 0)]
        spread = (noisy["time_us_p75"] - noisy["time_us_p25"]) / noisy["time_us"]
        noisy = noisy[spread > NOISY_SPREAD]
        if not noisy.empty:
            described = ", ".join(
                f"{series} N={nodes} ({len(part)})"
                for (series, nodes), part in noisy.groupby(["series", "nodes"])
            )
            notes.append(
                f"At 1 MiB and above, {len(noisy)} point(s) have an interquartile spread "
                f"wider than {100 * NOISY_SPREAD:g} % of the median: {described}. "
                "The machine was probably busy; treat those medians with care."
            )
        notes.extend(self._above_ceiling())
        single = rows[rows["nodes"] == 1]
        if not single.empty:
            notes.append(
                "Rows with N = 1 move no data between nodes: their busbw is 0 by definition "
                "and they are left out of the bandwidth figure."
            )
        if (rows["bytes"] == 0).any():
            notes.append("0-byte rows are in the tables but cannot be drawn on a log size axis.")
        return notes


def _first_buffer_size(runs, run_names) -> int | None:
    for run in runs:
        if run.name in run_names:
            size = run.ceilings.get("cpu_buffer_bytes")
            if isinstance(size, int) and not isinstance(size, bool):
                return size
    return None


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


# The harness targets a spread within 10 % of the median on a quiet machine.
NOISY_SPREAD = 0.10
