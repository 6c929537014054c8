"""The measuring loop: every backend, sync mode, algorithm, node count and size, measured
alike.

For each point: fresh inputs drawn by the harness, ``-w`` untimed and ``-n`` timed calls
each after an untimed restore of the inputs, the median and spread of the per-call times,
and (with ``-c 1``) every node's result checked against a wide NumPy reference.  The
backends plug in through :mod:`ring.bench.backends`; nothing here names one.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import auto
from ..planning import race, store
from ..planning.candidates import check_auto_pick
from ..schedule import AUTO
from .backends import Backend, get_backend
from .ceilings import host_array_bytes, host_ceilings_document, measure_cpu_ceilings
from .cli import BenchConfig, BenchInputError, sizes_of
from .environment import collect_environment, git_commit, launch_command, memory_bytes, utc_now
from .interleave import SweepFailed, measure_interleaved
from .nccl_compat import variants
from .point import Point
from .results import SCHEMA, output_problem
from .run_output import (
    Output,
    ceiling_line,
    host_line,
    pages_line,
    print_summary,
    run_header,
    run_warnings,
    write_outputs,
)
from .series import Series, series_of
from .watchdog import Watchdog
from .world import LocalWorld, MpiWorld, launched_rank, launched_size, under_mpirun

__all__ = ["DEFAULT_NODES", "Plan", "plan_run", "run"]

DEFAULT_NODES = (2,)
# Exit status of a run whose sweep failed part-way (its measured sizes written, partial).
PARTIAL = 3
# How long the ranks wait for each other to stop after a failed point: a failure every rank
# sees alike stops them within moments of each other.
STOP_SECONDS = 30.0


@dataclass
class Stage:
    """One backend with the sync modes, algorithms and node counts it runs in this
    invocation."""

    backend: Backend
    syncs: tuple[str, ...]
    nodes: tuple[int, ...]
    algorithms: tuple[str, ...] = ("",)


@dataclass
class Plan:
    config: BenchConfig
    world: LocalWorld | MpiWorld
    stages: list[Stage]

    @property
    def points(self) -> int:
        return len(series_of(self)) * len(self.config.sizes)


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


def _algorithms(backend: Backend, requested: tuple[str, ...] | None) -> tuple[str, ...]:
    """The requested algorithms, the backend's default when none were, or its own name
    when it runs one algorithm of its own (see :mod:`ring.bench.algorithms`)."""
    runs = tuple(backend.algorithms)
    if not runs:
        return (backend.name,)
    if requested is None:
        return (runs[0],)
    missing = [name for name in requested if name not in runs]
    if missing:
        raise BenchInputError(
            f"backend {backend.name} does not run algorithm {', '.join(missing)}: "
            f"it runs {', '.join(runs)}"
        )
    return requested


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
    if config.rounds > 1:  # every series of a size holds its buffers at once
        need *= sum(len(s.syncs) * len(s.algorithms) * len(s.nodes) for s in stages)
    if need > total:
        raise BenchInputError(
            f"the largest point needs about {need / 2**30:.1f} GiB of memory but this "
            f"machine has {total / 2**30:.1f} GiB: lower -e/--max-bytes or --nodes"
            + (" (or drop --rounds)" if config.rounds > 1 else "")
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
            nodes: tuple[int, ...] = (world.size,)
        else:
            nodes = config.nodes or DEFAULT_NODES
        syncs = _syncs(backend, config.sync)
        stages.append(Stage(backend, syncs, nodes, _algorithms(backend, config.algorithms)))
    for stage in stages:
        stage.backend.check(config, world)
    host_array_bytes()  # a bad RING_CEILING_BYTES is refused before anything is measured
    _check_auto_table(config)
    _check_memory(config, stages, world)
    plan = Plan(config, world, stages)
    if config.select is not None and all(not s.backend.algorithms for s in series_of(plan)):
        raise BenchInputError(
            "--select names none of the series of ours this run's flags give (--backend, "
            "--algorithm, --sync, --executor, --buffers): give the screen's flags"
        )
    if config.out is not None:
        # Only rank 0 writes; every rank learns whether it can, before anything is measured.
        world.root_verdict(output_problem(config.out) if world.is_root else None)
    return plan


def _planning_document() -> dict:
    """What ``algorithm="auto"`` spent planning by measuring in this process (ring.planning):
    the calls that ran to time a candidate and their seconds, and where its plans are kept."""
    path = store.wisdom_path()
    cost = race.planning_cost()
    return {
        "calls": cost.calls,
        "seconds": cost.seconds,
        "wisdom": None if path is None else str(path),
    }


def _check_auto_table(config: BenchConfig) -> None:
    """A ``RING_AUTO_TABLE`` that ``--algorithm auto`` would read is checked before anything
    is measured: a bad table is the run's input, not a failure of its first point."""
    if AUTO not in (config.algorithms or ()):
        return
    path = os.environ.get(auto.TABLE_ENV)
    if path:
        try:
            for table in auto.load_tables(Path(path)):
                for names in table["candidates"].values():
                    for name in names:
                        check_auto_pick(table["backend"], name)
        except auto.AutoTableError as exc:
            raise BenchInputError(f"{auto.TABLE_ENV}: {exc}") from None


def _host_ceilings(config: BenchConfig, world, output: Output, when: str) -> dict | None:
    """Rank 0 measures while the other ranks sleep in a barrier."""
    measured = measure_cpu_ceilings(config.dtype) if world.is_root else None
    world.idle_barrier()
    if measured is not None:
        output.line(ceiling_line(measured, when))
    return measured


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
    output = Output(world.is_root, sum(one.points for one in plans))
    environment = collect_environment(world) if world.is_root else {}
    commit, dirty = git_commit() if world.is_root else (None, None)
    for line in run_header(config):
        output.line(line)
    if world.is_root:
        output.line(host_line(environment, commit, dirty))
        if "shared" in (config.options.get("buffers") or ""):
            output.line(pages_line(environment))
    measured, ceilings, failure = _measure_all(config, plans, output)
    wrong_total = print_summary(output, config, measured, ceilings)
    write_error = None
    if world.is_root and config.out is not None and measured:
        document = {
            "schema": SCHEMA,
            "command": list(command),
            # What was typed, launcher included (under mpirun: its own command line).
            "launch_command": launch_command(command) if under_mpirun() else list(command),
            "start_time": start_time,
            "end_time": utc_now(),
            "git_commit": commit,
            "git_dirty": dirty,
            "environment": environment,
            "ceilings": ceilings,
            "config": _config_document(config, plan),
            "backends": {s.backend.name: s.backend.describe() for s in plan.stages},
            "wrong_total": wrong_total if config.check else None,
            "warnings": run_warnings(ceilings),
            "planning": _planning_document(),
        }
        if failure is not None:
            document["partial"] = _partial_document(failure)
        write_error = write_outputs(config.out, measured, document, output)
    # Instead of a barrier: every rank learns whether rank 0 could write, and exits alike.
    world.root_verdict(write_error)
    if failure is not None:
        if world.is_root:
            print(_stopped_line(config, failure, measured), file=sys.stderr)
        return PARTIAL
    if wrong_total:
        if world.is_root:
            print(
                f"ring.bench: {wrong_total} wrong elements: the results are not valid",
                file=sys.stderr,
            )
        return 1
    return 0


def _reason(failure: SweepFailed) -> str:
    return (str(failure).strip().splitlines() or [type(failure.error).__name__])[0]


def _partial_document(failure: SweepFailed) -> dict:
    """What the JSON of a sweep that failed part-way says: it is partial, where and why."""
    return {"stopped_at_bytes": failure.nbytes, "reason": _reason(failure)}


def _stopped_line(config: BenchConfig, failure: SweepFailed, measured: list[Series]) -> str:
    where = "opening its series" if failure.nbytes is None else f"{failure.nbytes} B"
    sizes = len({row["bytes"] for s in measured for row in s.rows})
    if not sizes:
        kept = "no size was measured, nothing written"
    elif config.out is None:
        kept = f"{sizes} sizes were measured (no --out: nothing written)"
    else:
        kept = f"the {sizes} sizes measured before it are in {config.out}, marked partial"
    return f"ring.bench: error: the sweep stopped at {where} ({_reason(failure)}); {kept}"


def _measure_all(
    config: BenchConfig, plans: list[Plan], output: Output
) -> tuple[list[Series], dict, SweepFailed | None]:
    """Every series of every plan, between the host ceilings at the start and at the end;
    the ceilings document (rank 0's; empty on the other ranks); the failure that ended
    the sweep early, if one did (the series then hold the rows measured before it)."""
    plan = plans[0]
    world = plan.world
    start_ceilings = _host_ceilings(config, world, output, "start")
    device_ceilings: dict = {}
    for stage in plan.stages:
        device_ceilings.update(stage.backend.ceilings(config, world))
    measured: list[Series] = []
    failure = None
    try:
        for one in plans:
            measured += measure_interleaved(
                one, lambda session, s, count, one=one: Point(session, s, count, one), output
            )
    except SweepFailed as failed:
        failure = failed
        measured += [s for s in failed.series if s.rows]
        if not world.all_stopped(STOP_SECONDS):
            print(f"ring.bench: error: rank {world.rank}: {_reason(failed)}", file=sys.stderr)
            world.abort(PARTIAL)  # the other ranks are blocked inside MPI
    finally:
        output.close()
    end_ceilings = None if failure else _host_ceilings(config, world, output, "end")
    ceilings: dict = {}
    if start_ceilings is not None:
        ceilings = {**host_ceilings_document(start_ceilings, end_ceilings), **device_ceilings}
    return measured, ceilings, failure


def _config_document(config: BenchConfig, plan: Plan) -> dict:
    return {
        **config.to_json(),
        "stages": [
            {
                "backend": s.backend.name,
                "sync": list(s.syncs),
                "algorithms": list(s.algorithms),
                "nodes": list(s.nodes),
            }
            for s in plan.stages
        ],
        "mpi_world_size": plan.world.size,
    }


def env_is_root() -> bool:
    """Rank 0 (or no launcher): only it reports errors that every rank hits alike."""
    return launched_rank() == 0
