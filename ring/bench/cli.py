"""Command-line parsing for ``python -m ring.bench``: flags modelled on nccl-tests.

Everything a run needs is checked here, before anything is measured or written, so that
bad input ends with one line on stderr and exit code 2. The flag primitives live in
:mod:`ring.bench.flags` and the shared size sweep in :mod:`ring.bench.sweep`; their names
are importable from here too, as the other subcommands and the model always did.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

import numpy as np

from ..communicator import MAX_NODES
from ..ops import ARITHMETIC
from .algorithms import library_algorithms
from .flags import BenchInputError, BenchParser, int_flag, parse_size, split_list
from .nccl_compat import ALL_DTYPES, AVERAGE_MODES, DEFAULT_AVERAGE
from .osu import OsuFlags, osu_argv
from .selection import add_selection_arguments, load_selection, parse_order
from .sweep import (
    DTYPE_ALIASES,
    MAX_SIZES,
    Sweep,
    add_sweep_arguments,
    harness_op,
    parse_dtype,
    parse_out,
    parse_sweep,
    sizes_of,
    sweep_sizes,
)

__all__ = [
    "DTYPE_ALIASES",
    "MAX_SIZES",
    "BenchConfig",
    "BenchInputError",
    "BenchParser",
    "Sweep",
    "add_sweep_arguments",
    "build_parser",
    "int_flag",
    "parse_args",
    "parse_size",
    "parse_sweep",
    "sizes_of",
    "split_list",
    "sweep_sizes",
]


@dataclass(frozen=True)
class BenchConfig(Sweep):
    """The parsed arguments of one run (recorded as ``config`` in the JSON)."""

    backends: tuple[str, ...]
    nodes: tuple[int, ...] | None
    sync: tuple[str, ...] | None
    # Seconds after which the whole run (every MPI rank) is aborted; None = no limit.
    timeout: float | None = None
    # Flags that backends add through Backend.add_arguments, by argparse dest.
    options: dict = field(default_factory=dict)
    # -d all / -o all: every (dtype, op) pair is measured; else just (dtype, op).
    dtypes: tuple[np.dtype, ...] = ()
    ops: tuple[str, ...] = ()
    # -a: one call's time across MPI ranks: 0 rank 0, 1 average (nccl-tests' default),
    # 2 minimum, 3 maximum.
    average: int = DEFAULT_AVERAGE
    # --algorithm: what the ring backends run (None: each backend's default).
    algorithms: tuple[str, ...] | None = None
    # --rounds: each size's timed calls split into this many rounds over every series.
    rounds: int = 1
    # --out-of-place 1 (default): each size is also timed out of place (the table's first
    # group), before in place, as nccl-tests does.
    out_of_place: bool = True
    # nccl-tests' flags that the harness records (-t -g -m -p -r -z -y -G -C), by their
    # long names; what each does here is in NCCL_FLAGS.
    nccl_flags: dict = field(default_factory=dict)
    # --osu: OSU's flags (-m -i -x -f) and OSU's table on stdout.
    osu: OsuFlags | None = None
    # --select: only these series (ring.bench.selection), None: every series the flags give.
    select: tuple[dict, ...] | None = None
    # --order: the order the series are visited in at each size and round.
    order: str = "forward"

    def __getattr__(self, name: str):
        # A backend reads its own flag as config.<dest>; unknown names still fail.
        options = self.__dict__.get("options", {})
        if name in options:
            return options[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(size // self.dtype.itemsize for size in self.sizes)

    def to_json(self) -> dict:
        return {
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "step_factor": self.step_factor,
            "iters": self.iters,
            "warmup": self.warmup,
            "check": int(self.check),
            "step_bytes": self.step_bytes,
            "dtype": self.dtype.name,
            "op": self.op,
            "dtypes": [dtype.name for dtype in self.dtypes],
            "ops": list(self.ops),
            "average": self.average,
            "backends": list(self.backends),
            "nodes": None if self.nodes is None else list(self.nodes),
            "sync": None if self.sync is None else list(self.sync),
            "algorithms": None if self.algorithms is None else list(self.algorithms),
            "rounds": self.rounds,
            "out_of_place": int(self.out_of_place),
            "nccl_flags": dict(self.nccl_flags),
            "osu": None if self.osu is None else self.osu.to_json(),
            "select": None if self.select is None else [dict(s) for s in self.select],
            "order": self.order,
            "out": None if self.out is None else str(self.out),
            "seed": self.seed,
            "sizes": list(self.sizes),
            "timeout": self.timeout,
            "options": dict(self.options),
        }


def build_parser(known_backends, known_syncs) -> argparse.ArgumentParser:
    parser = BenchParser(
        prog="python -m ring.bench",
        description=(
            "Measure allreduce the way nccl-tests' all_reduce_perf does: one line per size, "
            "median time of -n calls after -w warm-up calls, algbw, busbw, #wrong. "
            "Sizes take binary suffixes (1K, 64M, 1G). "
            "Combine result files with: python -m ring.bench merge --out OUT.csv IN.csv..."
        ),
    )
    add_sweep_arguments(parser, max_default="16M", per="per node", calls="calls")
    add = parser.add_argument
    add(
        "--backend",
        default="cpu",
        help=f"comma list of: {', '.join(known_backends)} (default cpu)",
    )
    add(
        "--nodes",
        default=None,
        help="comma list of node counts, e.g. 2,4 (default 2; the world size under mpirun)",
    )
    add(
        "--sync",
        default=None,
        help=f"comma list of: {', '.join(known_syncs)} (default: each backend's own default)",
    )
    add(
        "--algorithm",
        default=None,
        help=f"comma list of: {', '.join(library_algorithms())}, run by the ring backends "
        "in turn (default ring); a peer's rows carry its own name",
    )
    add(
        "--rounds",
        default="1",
        help="split each size's -n timed calls into this many rounds, each visiting every "
        "series in turn (one untimed call opens each later round), so the machine's drift "
        "reaches every series alike; every series of a size then holds its buffers at once "
        "(default 1: each series' calls back to back)",
    )
    add(
        "-T",
        "--timeout",
        default=None,
        help="abort the run (every MPI rank) after this many seconds, with a message",
    )
    add(
        "-a",
        "--average",
        default=str(DEFAULT_AVERAGE),
        help="one call's time across MPI ranks: 0 rank 0, 1 average, 2 minimum, "
        f"3 maximum (default {DEFAULT_AVERAGE}, the average, as nccl-tests)",
    )
    add(
        "--out-of-place",
        default="1",
        help="1 (default): time every size out of place too (separate send and receive "
        "buffers: the table's first group, as nccl-tests), before in place; 0: in place only",
    )
    add(
        "-F",
        "--results_file",
        default=None,
        help="the CSV to write, as --out (the --results_file of nccl-tests' CSV fork)",
    )
    for short, long, default, meaning in NCCL_FLAGS:
        add(short, f"--{long}", default=None, help=f"nccl-tests' {meaning} (default {default})")
    add_selection_arguments(parser)
    add(
        "--osu",
        action="store_true",
        help="OSU's flags and table instead of nccl-tests': -m [MIN:]MAX sizes, -i timed "
        "iterations, -x warm-up iterations, -f min/avg/max over ranks and iterations",
    )
    return parser


# nccl-tests' flags with no counterpart of their own here: (short, long, nccl-tests' default,
# what it means there).  Each is accepted, recorded in the JSON's config.nccl_flags, and a
# value other than nccl-tests' default gets a header line saying what it does here
# (run_output.nccl_flag_lines).
NCCL_FLAGS = (
    ("-t", "nthreads", "1", "threads per process"),
    ("-g", "ngpus", "1", "GPUs per thread"),
    ("-m", "agg_iters", "1", "operations aggregated in one iteration (a group call)"),
    ("-p", "parallel_init", "0", "1: initialise the communicators from threads in parallel"),
    ("-r", "root", "0", "root of a rooted collective (allreduce has none: root -1)"),
    ("-z", "blocking", "0", "0 non-blocking, 1-3: wait (and barrier) after calls"),
    ("-y", "stream_null", "0", "1: run on the default CUDA stream"),
    ("-G", "cudagraph", "0", "capture the iterations as a CUDA graph, replay it N times"),
    ("-C", "report_cputime", "0", "1: report CPU time instead of latency"),
)


def parse_args(argv, known_backends, known_syncs) -> BenchConfig:
    """Parse and check ``argv``; raise :class:`BenchInputError` on anything wrong.

    ``known_backends`` maps names to backend classes (or is a list of names); each class
    may add its own flags with ``add_arguments(parser)``, parsed into ``config.options``.
    """
    argv, osu = osu_argv(list(argv))
    parser = build_parser(list(known_backends), known_syncs)
    core = {action.dest for action in parser._actions}
    if isinstance(known_backends, dict):
        for backend in known_backends.values():
            add_arguments = getattr(backend, "add_arguments", None)
            if add_arguments is not None:
                add_arguments(parser)
    args = parser.parse_args(argv)
    options = {
        dest: value for dest, value in vars(args).items() if dest not in core and dest != "help"
    }
    dtypes, ops = _all_or_one(args)
    sweep = parse_sweep(args)
    for name in dtypes:
        for op in ops:
            harness_op(op, parse_dtype(name))
    average = int_flag(args.average, "-a/--average", 0)
    if average not in AVERAGE_MODES:
        raise BenchInputError(f"-a/--average must be 0, 1, 2 or 3, got {average}")
    backends = _known_items(args.backend, "--backend", "backend", known_backends)
    if isinstance(known_backends, dict):
        _check_backend_flags(parser, args, _flag_owners(known_backends, known_syncs), backends)
    rounds = int_flag(args.rounds, "--rounds", 1)
    if rounds > sweep.iters:
        raise BenchInputError(
            f"--rounds {rounds} is more than the {sweep.iters} timed calls per size (-n)"
        )
    sync = None if args.sync is None else _known_items(args.sync, "--sync", "sync", known_syncs)
    if args.out_of_place not in ("0", "1"):
        raise BenchInputError(f"--out-of-place must be 0 or 1, got {args.out_of_place!r}")
    nccl_flags = _nccl_flags(args)
    fields = vars(sweep)
    if args.results_file is not None:
        if args.out is not None:
            raise BenchInputError("give -F/--results_file or --out, not both (they are one)")
        fields["out"] = parse_out(args.results_file)
    return BenchConfig(
        **fields,
        backends=backends,
        nodes=None if args.nodes is None else _parse_nodes(args.nodes),
        sync=sync,
        timeout=None if args.timeout is None else _parse_timeout(args.timeout),
        options=options,
        dtypes=tuple(np.dtype(name) for name in dtypes),
        ops=ops,
        average=average,
        algorithms=None if args.algorithm is None else _parse_algorithms(args.algorithm),
        rounds=rounds,
        out_of_place=args.out_of_place == "1",
        nccl_flags=nccl_flags,
        osu=osu,
        select=None if args.select is None else load_selection(args.select),
        order=parse_order(args.order),
    )


def _nccl_flags(args: argparse.Namespace) -> dict[str, int]:
    """nccl-tests' recorded flags as whole numbers (its own defaults where not given)."""
    values = {}
    for short, long, default, _ in NCCL_FLAGS:
        text = getattr(args, long)
        minimum = 1 if long in ("nthreads", "ngpus", "agg_iters") else 0
        values[long] = int_flag(default if text is None else text, f"{short}/--{long}", minimum)
    for long in ("parallel_init", "stream_null", "report_cputime"):
        if values[long] > 1:
            raise BenchInputError(f"--{long} must be 0 or 1, got {values[long]}")
    if values["blocking"] > 3:
        raise BenchInputError(f"-z/--blocking must be 0, 1, 2 or 3, got {values['blocking']}")
    return values


def _flag_owners(known_backends: dict, known_syncs) -> dict[str, set[str]]:
    """Per backend flag (by argparse dest), the backends that take it."""
    owners: dict[str, set[str]] = {}
    for name, backend in known_backends.items():
        add_arguments = getattr(backend, "add_arguments", None)
        if add_arguments is None:
            continue
        scratch = build_parser(list(known_backends), known_syncs)
        before = {action.dest for action in scratch._actions}
        add_arguments(scratch)
        for action in scratch._actions:
            if action.dest not in before:
                owners.setdefault(action.dest, set()).add(name)
    return owners


def _check_backend_flags(parser, args, owners: dict[str, set[str]], backends) -> None:
    """A backend's flag given to a run that measures none of the backends taking it would
    be ignored without a word: refuse it instead."""
    for action in parser._actions:
        names = owners.get(action.dest)
        if not names or names & set(backends):
            continue
        if getattr(args, action.dest) != action.default:
            taken = ", ".join(sorted(names))
            raise BenchInputError(
                f"{action.option_strings[0]} is a flag of backend {taken}, which this run does "
                f"not measure (--backend {','.join(backends)})"
            )


def _known_items(text: str, flag: str, what: str, known) -> tuple[str, ...]:
    """The comma list ``text``, every item one of ``known``."""
    names = split_list(text, flag)
    for name in names:
        if name not in known:
            raise BenchInputError(f"unknown {what} {name!r}: expected one of {', '.join(known)}")
    return names


def _parse_nodes(text: str) -> tuple[int, ...]:
    values = []
    for item in split_list(text, "--nodes"):
        try:
            value = int(item)
        except ValueError:
            raise BenchInputError(
                f"--nodes {text!r}: {item!r} is not a whole number (use e.g. 2,4)"
            ) from None
        if not 1 <= value <= MAX_NODES:
            raise BenchInputError(f"--nodes {text!r}: every value must be in [1, {MAX_NODES}]")
        values.append(value)
    return tuple(values)


def _parse_timeout(text: str) -> float:
    try:
        timeout = float(text)
    except ValueError:
        raise BenchInputError(f"--timeout {text!r} is not a number") from None
    if not (timeout > 0 and math.isfinite(timeout)):
        raise BenchInputError(f"--timeout must be a positive number of seconds, got {text}")
    return timeout


def _parse_algorithms(text: str) -> tuple[str, ...]:
    return _known_items(text, "--algorithm", "algorithm", library_algorithms())


def _all_or_one(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``-d all`` / ``-o all`` (nccl-tests): every type and op; the first stands in for
    the sweep's checks, which then run again for each pair."""
    dtypes = ALL_DTYPES if args.dtype.lower() == "all" else (args.dtype,)
    ops = ARITHMETIC if args.op.lower() == "all" else (args.op,)
    args.dtype, args.op = dtypes[0], ops[0]
    return dtypes, ops
