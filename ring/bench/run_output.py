"""What a run of the harness prints and writes: the nccl-tests-style lines on stdout (rank 0
only), the footer of each series, and the result files (CSV, JSON, samples) with a
one-line reason when they cannot be written."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .ceilings import DRIFT_LIMIT
from .interleave import sample_rows
from .nccl_compat import avg_busbw_line, nccl_header_line, out_of_bounds_line
from .results import SAMPLE_COLUMNS, columns_of, csv_text, samples_path, write_result_pair
from .series import Series

if TYPE_CHECKING:
    from .backends import Backend
    from .cli import BenchConfig

__all__ = [
    "Output",
    "block_footer",
    "ceiling_line",
    "host_line",
    "nccl_flag_lines",
    "pages_line",
    "print_summary",
    "run_header",
    "run_warnings",
    "write_outputs",
]


class Output:
    """stdout lines on rank 0; a tqdm bar on stderr only when stderr is a terminal."""

    def __init__(self, enabled: bool, total: int):
        self.enabled = enabled
        self.bar = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, file=sys.stderr, unit="size", leave=False)

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
        else:
            print(text, file=sys.stdout, flush=True)

    def step(self, description: str) -> None:
        if self.bar is not None:
            self.bar.set_description(description, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _fmt(value: float | None, unit: str = "GB/s") -> str:
    return "N/A" if value is None else f"{value:.2f} {unit}"


def block_footer(rows: list[dict], ceilings: dict, backend: Backend) -> list[str]:
    """A series' own summary: its mean busbw (not nccl-tests' line, which the run has once)
    and its traffic at the largest size against the ceiling."""
    busbw = [row["busbw_GBps"] for row in rows if row["busbw_GBps"] is not None]
    mean = f"{sum(busbw) / len(busbw):.2f}" if busbw else "N/A"
    lines = [f"# in-place busbw, mean over sizes : {mean} GB/s"]
    last = rows[-1]
    name, ceiling = backend.traffic_ceiling(ceilings)
    if last["traffic_GBps"] is not None and ceiling:
        lines.append(
            f"# Traffic at {last['bytes']} B : {_fmt(last['traffic_GBps'])} = "
            f"{100 * last['traffic_GBps'] / ceiling:.0f}% of the {name} ceiling ({_fmt(ceiling)})"
        )
    return lines


def ceiling_line(measured: dict, when: str) -> str:
    return (
        f"# Ceilings at the {when} ({measured['threads']} threads, "
        f"{'pinned, ' if measured['pinned'] else ''}{measured['array_bytes']} B arrays, "
        f"best of {measured['trials']}, bytes over the memory bus): "
        f"copy {_fmt(measured['copy_GBps'])}, add {_fmt(measured['add_GBps'])}, "
        f"triad {_fmt(measured['triad_GBps'])}"
    )


def run_warnings(ceilings: dict) -> list[str]:
    """What a reader of the JSON must know before trusting its ratios."""
    host = ceilings.get("host_memory") or {}
    if host.get("drifted"):
        return [
            f"host memory ceilings differ by {100 * host['drift']:.0f} % between the start and "
            f"the end of the run (limit {100 * host['drift_limit']:.0f} %): the machine's "
            "conditions changed during the run"
        ]
    return []


def pages_line(environment: dict) -> str:
    """Where MPI shared buffers keep their parts and whether they get huge pages, beside
    what NumPy's arrays (every other buffer) get: the two kinds can differ in page size."""
    pages = environment.get("huge_pages") or {}
    huge = pages.get("on_directory")
    kind = "not a tmpfs" if huge is None else f"tmpfs huge={huge}"
    return (
        f"# shared buffers' parts in {pages.get('directory')} ({kind}); NumPy's arrays: "
        f"transparent huge pages {pages.get('private')} (docs/api.md: RING_SHM_DIR)"
    )


def run_header(config: BenchConfig) -> list[str]:
    """nccl-tests' first line, then ours, then a line per nccl-tests flag given a value it
    cannot have here."""
    sizes = config.sizes
    flags = config.nccl_flags or {}
    ours = (
        f"# ring.bench allreduce: {config.dtype.name} {config.op}, sizes {sizes[0]}..{sizes[-1]} B"
        f" (x{config.step_factor:g}), warmup {config.warmup}, iters {config.iters}, "
        f"check {int(config.check)}, seed {config.seed}, -a {config.average}"
    )
    if config.osu is not None:  # OSU's title comes with its table
        return [ours, *nccl_flag_lines(config)]
    header = nccl_header_line(config, flags.get("nthreads", 1), flags.get("ngpus", 1))
    return [header, ours, *nccl_flag_lines(config)]


def nccl_flag_lines(config: BenchConfig) -> list[str]:
    """What each nccl-tests flag given a value other than its default does here: honoured,
    or recorded (config.nccl_flags in the JSON) and why it cannot apply."""
    flags = config.nccl_flags or {}
    backends = ", ".join(config.backends)
    lines = []
    if flags.get("nthreads", 1) > 1:
        lines.append(
            f"# -t {flags['nthreads']}: cannot apply: there is one process (or one per mpirun "
            "rank) and each backend runs its nodes itself (cpu: a thread per node); "
            "--nodes sets how many: recorded, not applied"
        )
    if flags.get("ngpus", 1) > 1:
        lines.append(
            f"# -g {flags['ngpus']}: cannot apply to backend {backends}: the gpu and nccl "
            "backends put one node on each device (--nodes N: N devices), mpi ones one "
            "device per rank, and the others use none: recorded, not applied"
        )
    if flags.get("agg_iters", 1) > 1:
        lines.append(
            f"# -m {flags['agg_iters']}: cannot apply: the library has no group call "
            "(ncclGroupStart/End) to aggregate calls into; each call is timed alone: "
            "recorded, not applied (agg iters above says what was asked)"
        )
    if flags.get("parallel_init"):
        lines.append(
            "# -p 1: recorded; every communicator is built before anything is timed, so "
            "how it is initialised does not reach the times"
        )
    if flags.get("root"):
        lines.append(f"# -r {flags['root']}: allreduce has no root (root -1, as all_reduce_perf)")
    if flags.get("blocking"):
        lines.append(
            f"# -z {flags['blocking']}: recorded; calls here are never left in flight: host "
            "backends return when the collective is done and MPI ranks meet at a barrier "
            "before each timed call (-z 1's waits), whatever -z says"
        )
    if flags.get("stream_null"):
        lines.append(
            "# -y 1: cannot apply: the gpu and nccl backends run on streams of their own "
            "and host backends on none: recorded, not applied"
        )
    if flags.get("cudagraph"):
        lines.append(
            f"# -G {flags['cudagraph']}: recorded, not applied; the gpu backend's own "
            "--graphs 0|1 says whether its calls replay a captured CUDA graph"
        )
    if flags.get("report_cputime"):
        lines.append(
            "# -C 1: the time columns read cputime: host backends are timed on the host "
            "clock (perf_counter) anyway; gpu and nccl rows stay CUDA-event times"
        )
    return lines


def host_line(environment: dict, commit: str | None, dirty: bool | None) -> str:
    return (
        f"# host {environment['host']}, {environment['cpu_model']}, "
        f"{environment['usable_cores']} usable cores, {environment['python']}, "
        f"git {commit or 'N/A'}{' (modified)' if dirty else ''}"
    )


def print_summary(
    output: Output, config: BenchConfig, measured: list[Series], ceilings: dict
) -> int:
    """Each series' footer, the ceilings' drift and the wrong elements; returns their total."""
    for s in measured:
        output.line("#")
        output.line(f"# series {s.label}")
        for line in block_footer(s.rows, ceilings, s.backend):
            output.line(line)
    drift = ceilings.get("host_memory", {}).get("drift")
    if drift is not None:
        flag = " > the 15 % limit: the run's conditions changed" if drift > DRIFT_LIMIT else ""
        output.line(f"# Ceiling drift start/end : {100 * drift:.0f} %{flag}")
    rows = [row for s in measured for row in s.rows]
    wrong_total = sum(row[key] or 0 for row in rows for key in ("wrong", "oop_wrong") if key in row)
    output.line("#")
    checked = (
        "not checked (-c 0)"
        if not config.check
        else (f"{wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    )
    output.line(f"# Wrong elements       : {checked}")
    output.line(out_of_bounds_line(wrong_total if config.check else None))
    output.line(avg_busbw_line(rows))
    output.line("#")
    return wrong_total


def write_outputs(out: Path, measured: list[Series], document: dict, output: Output) -> str | None:
    """Write the CSV, its JSON and its samples together; the reason (one line) if not."""
    rows = [row for s in measured for row in s.rows]
    try:
        calls = sample_rows(measured)
        samples = csv_text(calls, columns_of(calls, SAMPLE_COLUMNS))
        write_result_pair(out, rows, columns_of(rows), document, [(samples_path(out), samples)])
    except OSError as exc:
        return (
            f"cannot write {out} (nothing written): {exc.strerror or exc}; "
            "the measurements above are not saved"
        )
    written = (out, out.with_suffix(".json"), samples_path(out))
    output.line(f"# Wrote {', '.join(map(str, written))}")
    return None
