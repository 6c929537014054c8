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
        "findings",
        "Is the screen's pick faster than the fastest peer, launch after launch?",
        "Each panel is one confirmation (a kind and N): at each size, time(fastest peer) / "
        "time(the screen's pick) in every launch (small dots; a cross: a launch set aside as "
        "an outlier), their median (a large marker) and their range (the bar: the "
        "finding's interval). Above the dotted line at 1× ours is faster. A hollow marker is "
        "a size set aside whole (more workers than cores).",
    ),
    FigureSpec(
        "screens",
        "Which of our series is fastest at each size, before any confirmation?",
        "Each panel is one screen (a kind and N, one launch): every series of ours and every "
        "peer (rows) at every size (columns), coloured by its time over the fastest at that "
        "size (1 = the fastest). A black frame marks the screen's pick among ours. One launch "
        "ranks; the findings judge the picks in other launches.",
    ),
    FigureSpec(
        "time_vs_size",
        "How long does one allreduce take at each buffer size?",
        "Median time per allreduce (in place) against the size of one node's buffer, one "
        "panel per kind and N, our plain ring beside the peers; the band spans the 25th to "
        "75th percentile of the timed calls. The points at 1 GiB come from the runs at the "
        "original study's own size. A hollow series ran more workers than cores "
        "(oversubscribed): the findings leave it out.",
    ),
    FigureSpec(
        "busbw",
        "What bus bandwidth does each implementation reach, and where does the original stand?",
        "Bus bandwidth (algbw · 2(N−1)/N, as nccl-tests) against buffer size, one panel per "
        "kind and N. The stars are the original study's published figures at 1 GiB, on their "
        "own machines (an 8-vCPU VM for the CPU ring; A100s over NVLink for the GPU ring): "
        "reference marks, not this machine's.",
    ),
    FigureSpec(
        "traffic_vs_ceiling",
        "How close does the CPU ring's memory traffic come to the memory's ceiling?",
        "Memory traffic of each schedule per second (the bytes it reads and writes, per "
        "docs/harness.md) against buffer size, with the add kernel's ceiling measured at the "
        "start and at the end of the same run (the grey band between the two): a ceiling "
        "measured apart from the series it bounds. Only sizes of at least 4× the last-level "
        "cache (right of the dotted line) compare with it.",
    ),
    FigureSpec(
        "sync_barrier_vs_pairwise",
        "Does pairwise synchronisation beat a barrier after every step on the CPU?",
        "Time of the CPU ring with a barrier after every step over the same ring with "
        "pairwise synchronisation, both from one launch (interleaved size by size), per N; "
        "the band spans the ratios of the two series' 25th and 75th percentiles.",
    ),
    FigureSpec(
        "scaling_nodes",
        "What does going from N = 2 to N = 4 nodes cost?",
        "Time at N = 4 over time at N = 2 for each implementation, from this build's sweeps "
        "(one launch each); the dotted line is 3 (2(N−1) at N = 4 over N = 2: the bytes of a "
        "ring through one memory). N = 4 runs more workers than a 2-core machine has cores.",
    ),
    FigureSpec(
        "profile_steps",
        "Where does a ring step spend its time, and how much of it is waiting?",
        "Per-step time by phase from the Nsight Systems NVTX ranges of each profile (median "
        "over nodes and calls), and the share of the profiled ring time spent blocked in "
        "synchronisation calls (OS runtime) where the profile recorded them.",
    ),
    FigureSpec(
        "cost_model",
        "How close is the fitted α–β–γ model to each algorithm's measured time?",
        "Predicted over measured time per algorithm against buffer size at N = 2, one row "
        "of panels per fit (the cpu backend by nodes and by slices; MPI on host and on "
        "shared buffers), the algorithms split over two panels; 1 = exact.",
    ),
)
SPECS = {spec.name: spec for spec in FIGURES}
