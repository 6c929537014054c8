"""The measuring loop: every backend, sync mode, node count and size, measured alike.

For each point: fresh inputs drawn by the harness, ``-w`` untimed and ``-n`` timed calls
each after an untimed restore of the inputs, the median and spread of the per-call times,
and (with ``-c 1``) every node's result checked against a wide NumPy reference.  The
backends plug in through :mod:`ring.bench.backends`; nothing here names one.
"""

from __future__ import annotations

import gc
import sys
from dataclasses import dataclass

import numpy as np

from ..mpi import Watchdog
from . import data
from .backends import Backend, Session, get_backend
from .ceilings import DRIFT_LIMIT, host_ceilings_document, measure_cpu_ceilings
from .cli import BenchConfig, BenchInputError, sizes_of
from .environment import (
    collect_environment,
    git_commit,
    launch_command,
    memory_bytes,
    utc_now,
)
from .interleave import Series, measure_interleaved, sample_rows
from .nccl_compat import (
    avg_busbw_line,
    out_of_bounds_line,
    should_check,
    variants,
)
from .results import (
    SAMPLE_COLUMNS,
    SCHEMA,
    columns_of,
    csv_text,
    make_row,
    output_problem,
    samples_path,
    write_result_pair,
)
from .world import LocalWorld, MpiWorld, launched_rank, launched_size, under_mpirun

__all__ = ["DEFAULT_NODES", "Plan", "plan_run", "run"]

DEFAULT_NODES = (2,)


@dataclass
class Stage:
    """One backend with the sync modes and node counts it runs in this invocation."""

    backend: Backend
    syncs: tuple[str, ...]
    nodes: tuple[int, ...]


@dataclass
class Plan:
    config: BenchConfig
    world: LocalWorld | MpiWorld
    stages: list[Stage]

    @property
    def points(self) -> int:
        blocks = sum(
            len(s.syncs) * len(s.nodes) * len(s.backend.variants(self.config)) for s in self.stages
        )
        return blocks * len(self.config.sizes)


def _syncs(backend: Backend, requested: tuple[str, ...] | None) -> tuple[str, ...]:
    if not backend.sync_modes:
        return ("none",)
    if requested is None:
        return (backend.sync_modes[0],)
    chosen = tuple(mode for mode in requested if mode in backend.sync_modes)
    if not chosen:
        raise BenchInputError(
            f"backend {backend.name} has no sync mode {', '.join(requested)}: "
            f"it accepts {', '.join(backend.sync_modes)}"
        )
    return chosen


def _world_for(backends: list[Backend]) -> LocalWorld | MpiWorld:
    ranked = [b.name for b in backends if b.needs_mpirun]
    local = [b.name for b in backends if not b.needs_mpirun]
    if ranked and local:
        raise BenchInputError(
            f"backend {', '.join(ranked)} runs one node per mpirun rank and "
            f"{', '.join(local)} runs in one process: measure them in separate runs and "
            "combine the files with: python -m ring.bench merge --out OUT.csv IN.csv..."
        )
    if ranked:
        return MpiWorld(ranked[0])
    size = launched_size()
    if size is not None and size > 1:
        raise BenchInputError(
            f"backend {', '.join(local)} runs in one process, but mpirun started {size}: "
            "run it without mpirun"
        )
    return LocalWorld()


def _check_memory(config: BenchConfig, stages: list[Stage], world) -> None:
    """Refuse a sweep whose largest point cannot fit, rather than die half-way."""
    total = memory_bytes()
    if not total:
        return
    size = config.sizes[-1]
    local = max(1 if s.backend.needs_mpirun else max(s.nodes) for s in stages)
    wide = size // config.dtype.itemsize * max(8, config.dtype.itemsize)
    # inputs, working copies, the next inputs while the last are still held, reference
    need = ((3 * local + 1) * size + wide) * world.local_size
    if need > total:
        raise BenchInputError(
            f"the largest point needs about {need / 2**30:.1f} GiB of memory but this "
            f"machine has {total / 2**30:.1f} GiB: lower -e/--max-bytes or --nodes"
        )


def plan_run(config: BenchConfig) -> Plan:
    """Resolve backends, world, sync modes and node counts, and run every check.

    Raises :class:`BenchInputError` before anything is measured or written.
    """
    backends = [get_backend(name) for name in config.backends]
    world = _world_for(backends)
    stages = []
    for backend in backends:
        if backend.needs_mpirun:
            if config.nodes is not None and config.nodes != (world.size,):
                raise BenchInputError(
                    f"--nodes {','.join(map(str, config.nodes))} does not match the "
                    f"{world.size} ranks mpirun started: backend {backend.name} runs one "
                    "node per rank, so launch mpirun -n N once per node count"
                )
            nodes = (world.size,)
        else:
            nodes = config.nodes or DEFAULT_NODES
        stages.append(Stage(backend, _syncs(backend, config.sync), nodes))
    for stage in stages:
        stage.backend.check(config, world)
    _check_memory(config, stages, world)
    if config.out is not None:
        # Only rank 0 writes; every rank learns whether it can, before anything is measured.
        world.root_verdict(output_problem(config.out) if world.is_root else None)
    return Plan(config, world, stages)


class _Output:
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


def measure_point(session: Session, series: Series, count: int, plan: Plan) -> tuple[dict, list]:
    """One size of one series: its CSV row and the seconds of each timed call."""
    config, world, backend = plan.config, plan.world, series.backend
    sync, nodes = series.sync, series.nodes
    local_nodes = [world.rank] if backend.needs_mpirun else list(range(nodes))
    inputs = [
        data.make_input(config.seed, nodes, count, config.dtype, node) for node in local_nodes
    ]
    session.load(inputs)
    for _ in range(config.warmup):
        session.restore()
        session.call()
    windows = data.sample_windows(config.seed, count) if config.check else None
    # A collection pause inside a timed call would be charged to the backend.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for call in range(config.iters):
            session.restore()
            session.timed_call()
            if windows is not None and should_check(config.check, call, config.iters):
                session.keep_sample(windows)
    finally:
        if gc_was_enabled:
            gc.enable()
    times = session.times()
    if len(times) != config.iters:
        raise RuntimeError(
            f"backend {backend.name} reported {len(times)} times for {config.iters} calls"
        )
    wrong = None
    if windows is not None:
        known = dict(zip(local_nodes, inputs, strict=True))
        expected = data.reference(config.seed, nodes, count, config.dtype, config.op, known)
        wrong = world.sum_int(_count_wrong(session, expected, windows, config, nodes))
    nbytes = count * config.dtype.itemsize
    row = make_row(
        backend=backend.name,
        sync=sync,
        nodes=nodes,
        dtype=config.dtype,
        op=config.op,
        nbytes=nbytes,
        count=count,
        times_s=times,
        traffic_bytes=backend.traffic_bytes(nbytes, nodes),
        wrong=wrong,
        shared_devices=session.shared_devices,
        extras=session.row_extras(),
    )
    return row, times


def _count_wrong(session: Session, expected: np.ndarray, windows, config, nodes: int) -> int:
    """Wrong elements of this process's nodes: every element after the last call, and the
    sampled windows after each earlier checked one (-c N: every N-th; the worst call
    counts)."""
    rtol = data.tolerance(config.dtype, nodes)
    results = session.results()
    samples = session.take_samples()
    checked = sum(should_check(config.check, call, config.iters) for call in range(config.iters))
    if len(samples) != checked or any(len(s) != len(results) for s in samples):
        raise RuntimeError(f"backend {session!r} kept samples that do not match its calls")
    wrong = data.count_wrong_all(results, expected, rtol)
    in_windows = data.gather_windows(expected, windows)
    for sample in samples[:-1]:
        wrong = max(wrong, data.count_wrong_all(sample, in_windows, rtol))
    return wrong


def _fmt(value: float | None, unit: str = "GB/s") -> str:
    return "N/A" if value is None else f"{value:.2f} {unit}"


def _block_footer(rows: list[dict], ceilings: dict, backend: Backend) -> list[str]:
    lines = [avg_busbw_line(rows)]
    last = rows[-1]
    name, ceiling = backend.traffic_ceiling(ceilings)
    if last["traffic_GBps"] is not None and ceiling:
        lines.append(
            f"# Traffic at {last['bytes']} B : {_fmt(last['traffic_GBps'])} = "
            f"{100 * last['traffic_GBps'] / ceiling:.0f}% of the {name} ceiling ({_fmt(ceiling)})"
        )
    return lines


def _ceiling_line(measured: dict, when: str) -> str:
    return (
        f"# Ceilings at the {when} ({measured['threads']} threads, "
        f"{'pinned, ' if measured['pinned'] else ''}{measured['array_bytes']} B arrays, "
        f"best of {measured['trials']}, bytes over the memory bus): "
        f"copy {_fmt(measured['copy_GBps'])}, add {_fmt(measured['add_GBps'])}, "
        f"triad {_fmt(measured['triad_GBps'])}"
    )


def _host_ceilings(config: BenchConfig, world, output, when: str) -> dict | None:
    """Rank 0 measures while the other ranks sleep in a barrier."""
    measured = measure_cpu_ceilings(config.dtype) if world.is_root else None
    world.idle_barrier()
    if measured is not None:
        output.line(_ceiling_line(measured, when))
    return measured


def _warnings(ceilings: dict) -> list[str]:
    """What a reader of the JSON must know before trusting its ratios."""
    host = ceilings.get("host_memory") or {}
    if host.get("drifted"):
        return [
            f"host memory ceilings differ by {100 * host['drift']:.0f} % between the start and "
            f"the end of the run (limit {100 * host['drift_limit']:.0f} %): the machine's "
            "conditions changed during the run"
        ]
    return []


def run(config: BenchConfig, command: list[str]) -> int:
    """Measure, print, write ``--out``; return 0, or 1 if any element was wrong.

    With ``--timeout`` a watchdog aborts the run (under mpirun: the whole job, since a
    rank blocked in MPI by a dead peer can end it no other way) and nothing is written.
    """
    plans = [plan_run(one) for one in _variants(config)]
    with Watchdog(config.timeout, message=f"ring.bench: --timeout {config.timeout} s reached"):
        return _run_plan(config, plans, command)


def _variants(config: BenchConfig) -> list[BenchConfig]:
    """One config per (dtype, op) of ``-d all`` / ``-o all``; else the config itself."""
    if len(config.dtypes) * len(config.ops) <= 1:
        return [config]
    return variants(
        config,
        lambda dtype: sizes_of(
            config.min_bytes,
            config.max_bytes,
            config.step_factor,
            config.step_bytes,
            dtype.itemsize,
        ),
    )


def _run_plan(config: BenchConfig, plans: list[Plan], command: list[str]) -> int:
    plan = plans[0]
    world = plan.world
    start_time = utc_now()
    output = _Output(world.is_root, sum(one.points for one in plans))
    environment = collect_environment(world) if world.is_root else {}
    commit, dirty = git_commit() if world.is_root else (None, None)
    sizes = config.sizes
    output.line(
        f"# ring.bench allreduce: {config.dtype.name} {config.op}, sizes {sizes[0]}..{sizes[-1]} B"
        f" (x{config.step_factor:g}), warmup {config.warmup}, iters {config.iters}, "
        f"check {int(config.check)}, seed {config.seed}"
    )
    if world.is_root:
        output.line(
            f"# host {environment['host']}, {environment['cpu_model']}, "
            f"{environment['usable_cores']} usable cores, {environment['python']}, "
            f"git {commit or 'N/A'}{' (modified)' if dirty else ''}"
        )

    start_ceilings = _host_ceilings(config, world, output, "start")
    device_ceilings: dict = {}
    for stage in plan.stages:
        device_ceilings.update(stage.backend.ceilings(config, world))
    measured: list[Series] = []
    try:
        for one in plans:
            measured += measure_interleaved(
                one,
                lambda session, s, count, one=one: measure_point(session, s, count, one),
                output,
            )
    finally:
        output.close()
    end_ceilings = _host_ceilings(config, world, output, "end")
    ceilings: dict = {}
    if world.is_root:
        ceilings = {**host_ceilings_document(start_ceilings, end_ceilings), **device_ceilings}
    rows = [row for s in measured for row in s.rows]
    for s in measured:
        output.line("#")
        output.line(f"# series {s.label}")
        for line in _block_footer(s.rows, ceilings, s.backend):
            output.line(line)
    drift = ceilings.get("host_memory", {}).get("drift")
    if drift is not None:
        flag = " > the 15 % limit: the run's conditions changed" if drift > DRIFT_LIMIT else ""
        output.line(f"# Ceiling drift start/end : {100 * drift:.0f} %{flag}")

    wrong_total = sum(row["wrong"] for row in rows if row["wrong"] is not None)
    output.line("#")
    checked = (
        "not checked (-c 0)"
        if not config.check
        else (f"{wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}")
    )
    output.line(f"# Wrong elements       : {checked}")
    output.line(out_of_bounds_line(wrong_total if config.check else None))
    end_time = utc_now()

    write_error = None
    if world.is_root and config.out is not None:
        document = {
            "schema": SCHEMA,
            "command": list(command),
            # What was typed, launcher included (under mpirun: its own command line).
            "launch_command": launch_command(command) if under_mpirun() else list(command),
            "start_time": start_time,
            "end_time": end_time,
            "git_commit": commit,
            "git_dirty": dirty,
            "environment": environment,
            "ceilings": ceilings,
            "config": {
                **config.to_json(),
                "stages": [
                    {"backend": s.backend.name, "sync": list(s.syncs), "nodes": list(s.nodes)}
                    for s in plan.stages
                ],
                "mpi_world_size": world.size,
            },
            "backends": {s.backend.name: s.backend.describe() for s in plan.stages},
            "wrong_total": wrong_total if config.check else None,
            "warnings": _warnings(ceilings),
        }
        try:
            samples = csv_text(sample_rows(measured), SAMPLE_COLUMNS)
            write_result_pair(
                config.out, rows, columns_of(rows), document, [(samples_path(config.out), samples)]
            )
            written = (config.out, config.out.with_suffix(".json"), samples_path(config.out))
            output.line(f"# Wrote {', '.join(map(str, written))}")
        except OSError as exc:
            write_error = (
                f"cannot write {config.out} (nothing written): {exc.strerror or exc}; "
                "the measurements above are not saved"
            )
    # Instead of a barrier: every rank learns whether rank 0 could write, and exits alike.
    world.root_verdict(write_error)
    if wrong_total:
        if world.is_root:
            print(
                f"ring.bench: {wrong_total} wrong elements: the results are not valid",
                file=sys.stderr,
            )
        return 1
    return 0


def env_is_root() -> bool:
    """Rank 0 (or no launcher): only it reports errors that every rank hits alike."""
    return launched_rank() == 0
