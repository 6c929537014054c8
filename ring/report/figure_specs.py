"""Every figure of the report: its name, the question it answers and its caption."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["FIGURES", "SPECS", "Figure", "FigureSpec"]


@dataclass(frozen=True)
class FigureSpec:
    """What a figure answers, and the caption every output of it carries."""

    name: str
    question: str
    caption: str


@dataclass(frozen=True)
class Figure:
    spec: FigureSpec
    png: Path | None = None
    svg: Path | None = None
    missing: str | None = None  # why it was not drawn

    @property
    def drawn(self) -> bool:
        return self.png is not None


FIGURES = (
    FigureSpec(
        "time_vs_size",
        "How long does one allreduce take at each buffer size?",
        "Median time per allreduce against the size of one node's buffer (log–log), one "
        "line per series, one panel per machine, backend (with its peers) and node count N; "
        "the band spans the 25th to 75th percentile of the timed calls.",
    ),
    *(
        FigureSpec(
            f"algorithms_{backend}",
            f"Which algorithm of the {backend} ring is fastest at each buffer size?",
            "Median time per allreduce (µs) against the size of one node's buffer (log–log), "
            f"one line per algorithm of our {backend} backend, all measured in one run per "
            "node count N (one panel each, titled with N, the machine where it is not this "
            "one, and the workers per core where N exceeds the cores: oversubscribed). The "
            "band spans the 25th to 75th percentile of the timed calls; at each size a black "
            "ring marks the fastest algorithm and the strip along the panel's foot takes its "
            "colour. A panel whose run measured only the ring says so: the other algorithms "
            "were not measured there."
            + (
                ' Each algorithm run by slices (the cpu backend\'s executor="slices": the '
                "plan by position on min(N, cores) threads) is a dashed line in its "
                "algorithm's colour, labelled (slices), its stretch of the strip hatched; "
                "the solid lines run one thread per node."
                if backend == "cpu"
                else ""
            )
            + (
                " Each algorithm on shared buffers (--buffers shared: memory every rank on "
                "the host maps, MpiRing.shared_buffer, where the plan runs by position with "
                "no message) is a dotted line in its algorithm's colour, labelled (shared), "
                "its stretch of the strip dotted; the solid lines use each rank's own buffers "
                "and messages."
                if backend == "mpi"
                else ""
            ),
        )
        for backend in ("cpu", "mpi", "gpu")
    ),
    FigureSpec(
        "bandwidth_vs_size",
        "How close does each backend come to the machine's ceilings?",
        "Top: bus bandwidth (algbw · 2(N−1)/N, as nccl-tests) with link ceilings between "
        "devices where the run measured them. Bottom: memory traffic of the schedule per "
        "second with the copy and add ceilings measured in the same runs (a line, or a shaded "
        "band from the lowest to the highest value where runs, devices or pairs measured one "
        "ceiling differently).",
    ),
    FigureSpec(
        "ring_vs_peers",
        "Is our fastest faster than the fastest peer of the same run?",
        "At each size: the fastest peer's median time over our fastest series' (any "
        "algorithm, sync or executor), both from one run; above 1 ours is faster. One panel "
        "per machine, backend and N, one line per run; the band is the ratio's interval "
        "(bootstrap 95 % where the run kept its timed calls, else both interquartile "
        "ranges); a cross marks a point the quality gate set aside.",
    ),
    FigureSpec(
        "gpu_vs_cpu_speedup",
        "Across machines: how much faster is the GPU ring than the CPU ring, and at which size?",
        "Wall-clock speedup of the GPU ring over the CPU ring (CPU time / GPU time) against "
        "buffer size; the marker shows the largest speedup of each pair. The two rings may "
        "have run on different machines (each series names a reference machine): a ratio "
        "of machines, not of code, and no finding. Series at different N are compared by "
        "time, not bandwidth.",
    ),
    FigureSpec(
        "scaling_nodes",
        "What does going from N = 2 to N = 4 nodes cost?",
        "One row of panels per machine and backend (with its peers). "
        "Left: time at the larger N over time at the smaller N; the dotted line is the ratio "
        "of the busbw factors 2(N−1)/N, where a ring limited by its links would sit. Right: "
        "busbw at the larger N over busbw at the smaller N (1 = busbw held).",
    ),
    FigureSpec(
        "profile_steps",
        "Where does a ring step spend its time, and how much of it is waiting?",
        "Per-step time by phase from the Nsight Systems NVTX ranges of each profile (median "
        "over nodes and calls), and the share of the profiled ring time spent blocked in "
        "synchronisation calls (OS runtime) where the profile recorded them.",
    ),
    FigureSpec(
        "sync_barrier_vs_pairwise",
        "Does pairwise synchronisation beat a barrier after every step on the CPU?",
        "Speedup of the CPU ring with pairwise synchronisation over the same ring with a "
        "barrier after every step (barrier time / pairwise time), per node count; the band "
        "combines both interquartile ranges.",
    ),
    FigureSpec(
        "kernel_bandwidth",
        "Does the GPU reduction kernel run at memory speed?",
        "Throughput of the single-GPU reduction kernel (two reads and one write per element) "
        "against buffer size, with the device-to-device copy ceiling of the same run. Not a "
        "ring measurement.",
    ),
    FigureSpec(
        "cost_model",
        "How close is the α–β–γ model to the measured time of each algorithm?",
        "Markers: measured median time per allreduce of each algorithm; lines: the fitted "
        "α–β–γ model's prediction for the same algorithm (one set of α, β, γ per machine and "
        "backend, fitted over all its algorithms jointly). One panel per fit and node count.",
    ),
)
SPECS = {spec.name: spec for spec in FIGURES}
