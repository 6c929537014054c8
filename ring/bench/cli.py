"""Command-line parsing for ``python -m ring.bench``: flags modelled on nccl-tests.

Everything a run needs is checked here, before anything is measured or written, so that
bad input ends with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..communicator import MAX_NODES
from ..ops import OPS, resolve_op
from .algorithms import library_algorithms
from .nccl_compat import ALL_DTYPES, AVERAGE_MODES, linear_sizes

__all__ = ["BenchConfig", "BenchInputError", "int_flag", "parse_args", "parse_size"]

MAX_SIZES = 1000
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)

# nccl-tests' type names next to NumPy's own.
DTYPE_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "uint": "uint32",
    "int8": "int8",
    "uint8": "uint8",
}


class BenchInputError(ValueError):
    """Bad input to the harness: reported as one line, exit code 2, no output file."""


class BenchParser(argparse.ArgumentParser):
    """Turns argparse's usage errors into :class:`BenchInputError` (one line, exit 2)."""

    def error(self, message: str):
        raise BenchInputError(message)


@dataclass(frozen=True)
class Sweep:
    """The checked values of :func:`add_sweep_arguments`' flags."""

    min_bytes: int
    max_bytes: int
    step_factor: float
    iters: int
    warmup: int
    # Validate every check-th timed call (and the last); 0 = never.
    check: int
    dtype: np.dtype
    op: str
    seed: int
    sizes: tuple[int, ...]
    out: Path | None
    # -i: sizes grow by this many bytes instead of by -f.
    step_bytes: int | None


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
    # -a: one call's time across MPI ranks: 0 rank 0, 1 average, 2 minimum, 3 maximum.
    average: int = 3
    # --algorithm: what the ring backends run (None: each backend's default).
    algorithms: tuple[str, ...] | None = None

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
            "out": None if self.out is None else str(self.out),
            "seed": self.seed,
            "sizes": list(self.sizes),
            "timeout": self.timeout,
            "options": dict(self.options),
        }


def parse_size(text: str) -> int:
    """Bytes in ``text``: a plain integer or one with a binary suffix (``1K``, ``64M``, ``1G``)."""
    match = _SIZE.match(text)
    if not match:
        raise BenchInputError(
            f"cannot parse size {text!r}: use a whole number of bytes with an optional "
            "K, M, G or T suffix (binary: 1K = 1024), e.g. 64M"
        )
    return int(match.group(1)) * _SUFFIXES[match.group(2).upper()]


def _parse_dtype(text: str) -> np.dtype:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    try:
        dtype = np.dtype(name)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "iufc" or dtype.name != name:
        raise BenchInputError(
            f"unknown dtype {text!r}: use a NumPy integer, floating or complex type name "
            "such as float32, float64, float16, int32, int64, complex64"
        )
    return dtype


def split_list(text: str, flag: str) -> tuple[str, ...]:
    """The items of a comma list, in order, each once; an empty item is an error."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise BenchInputError(f"{flag} {text!r} has an empty item: use a comma list like 2,4")
    return tuple(dict.fromkeys(items))


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


def sweep_sizes(min_bytes: int, max_bytes: int, factor: float, itemsize: int) -> tuple[int, ...]:
    """Sizes from ``min_bytes`` up to ``max_bytes`` multiplying by ``factor``, each rounded
    down to whole elements (as nccl-tests does)."""
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        rounded = size // itemsize * itemsize
        if rounded and (not sizes or rounded != sizes[-1]):
            sizes.append(rounded)
            if len(sizes) > MAX_SIZES:
                raise BenchInputError(
                    f"the sweep has more than {MAX_SIZES} sizes: raise -f/--step-factor "
                    "or narrow -b/-e"
                )
        size = max(size + 1, math.floor(size * factor))
    return tuple(sizes)


def add_sweep_arguments(parser, *, max_default: str, per: str, calls: str) -> None:
    """The nccl-tests flags every sweep command shares (-b -e -i -f -n -w -c -d -o, under
    nccl-tests' long names too), plus --out and --seed; :func:`parse_sweep` checks them."""
    add = parser.add_argument
    add("-b", "--min-bytes", "--minbytes", default="1K", help=f"smallest size {per} (default 1K)")
    add(
        "-e",
        "--max-bytes",
        "--maxbytes",
        default=max_default,
        help=f"largest size {per} (default {max_default})",
    )
    add("-f", "--step-factor", "--stepfactor", help="multiply the size by this (default 2)")
    add("-i", "--step-bytes", "--stepbytes", help="add this many bytes instead of using -f")
    add("-n", "--iters", default="20", help=f"timed {calls} per size (default 20)")
    add(
        "-w",
        "--warmup",
        "--warmup_iters",
        default="5",
        help=f"untimed {calls} per size before timing (default 5)",
    )
    add(
        "-c",
        "--check",
        default="1",
        help="validate every N-th timed call and the last: N=1 every call (default), 0 none",
    )
    add("-d", "--dtype", "--datatype", default="float32", help="element type (default float32)")
    add("-o", "--op", default="sum", help=f"reduction: {', '.join(OPS)} (default sum)")
    add("--out", default=None, help="write FILE.csv and FILE.json beside it")
    add("--seed", default="0", help="seed of the random inputs (default 0)")


def parse_sweep(args: argparse.Namespace) -> Sweep:
    """Check the shared sweep flags; raise :class:`BenchInputError` on anything wrong."""
    min_bytes = parse_size(args.min_bytes)
    max_bytes = parse_size(args.max_bytes)
    step_bytes = None
    if args.step_bytes is not None:
        if args.step_factor is not None:
            raise BenchInputError("give -f/--step-factor or -i/--step-bytes, not both")
        step_bytes = parse_size(args.step_bytes)
        if step_bytes < 1:
            raise BenchInputError(f"-i/--step-bytes must be at least 1 byte, got {step_bytes}")
    try:
        step_factor = float(args.step_factor or "2")
    except ValueError:
        raise BenchInputError(f"-f/--step-factor {args.step_factor!r} is not a number") from None
    if not step_factor > 1 or not math.isfinite(step_factor):
        raise BenchInputError(f"-f/--step-factor must be > 1, got {args.step_factor}")
    iters = int_flag(args.iters, "-n/--iters", 1)
    warmup = int_flag(args.warmup, "-w/--warmup", 0)
    check = int_flag(args.check, "-c/--check", 0)
    seed = int_flag(args.seed, "--seed", 0)
    dtype = _parse_dtype(args.dtype)
    try:
        resolve_op(args.op, dtype)
    except (TypeError, ValueError) as exc:
        raise BenchInputError(str(exc)) from None
    if min_bytes < dtype.itemsize:
        raise BenchInputError(
            f"-b/--min-bytes must hold at least one {dtype.name} element "
            f"({dtype.itemsize} bytes), got {min_bytes}"
        )
    if min_bytes > max_bytes:
        raise BenchInputError(
            f"-b/--min-bytes ({args.min_bytes}) is larger than -e/--max-bytes ({args.max_bytes})"
        )
    out = None
    if args.out is not None:
        out = Path(args.out)
        if out.suffix != ".csv" or not out.stem:
            raise BenchInputError(
                f"--out {args.out!r} must name a .csv file (the JSON goes beside it)"
            )
        if out.exists() and out.is_dir():
            raise BenchInputError(f"--out {args.out!r} is a directory")
    return Sweep(
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        step_factor=step_factor,
        iters=iters,
        warmup=warmup,
        check=check,
        dtype=dtype,
        op=args.op,
        seed=seed,
        sizes=sizes_of(min_bytes, max_bytes, step_factor, step_bytes, dtype.itemsize),
        out=out,
        step_bytes=step_bytes,
    )


def sizes_of(min_bytes, max_bytes, step_factor, step_bytes, itemsize) -> tuple[int, ...]:
    """The sweep's sizes: linear with -i, else geometric with -f."""
    if step_bytes is None:
        return sweep_sizes(min_bytes, max_bytes, step_factor, itemsize)
    if (max_bytes - min_bytes) // step_bytes >= MAX_SIZES:
        raise BenchInputError(
            f"the sweep has more than {MAX_SIZES} sizes: raise -i/--step-bytes or narrow -b/-e"
        )
    return tuple(linear_sizes(min_bytes, max_bytes, step_bytes, itemsize))


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
        "-T",
        "--timeout",
        default=None,
        help="abort the run (every MPI rank) after this many seconds, with a message",
    )
    add(
        "-a",
        "--average",
        default="3",
        help="one call's time across MPI ranks: 0 rank 0, 1 average, 2 minimum, "
        "3 maximum (default 3, the slowest rank)",
    )
    return parser


def int_flag(text: str, flag: str, minimum: int) -> int:
    """``text`` as a whole number of at least ``minimum``, or a one-line error naming ``flag``."""
    try:
        value = int(text)
    except ValueError:
        raise BenchInputError(f"{flag} {text!r} is not a whole number") from None
    if value < minimum:
        raise BenchInputError(f"{flag} must be >= {minimum}, got {value}")
    return value


def parse_args(argv, known_backends, known_syncs) -> BenchConfig:
    """Parse and check ``argv``; raise :class:`BenchInputError` on anything wrong.

    ``known_backends`` maps names to backend classes (or is a list of names); each class
    may add its own flags with ``add_arguments(parser)``, parsed into ``config.options``.
    """
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
            try:
                resolve_op(op, _parse_dtype(name))
            except (TypeError, ValueError) as exc:
                raise BenchInputError(str(exc)) from None
    average = int_flag(args.average, "-a/--average", 0)
    if average not in AVERAGE_MODES:
        raise BenchInputError(f"-a/--average must be 0, 1, 2 or 3, got {average}")
    backends = split_list(args.backend, "--backend")
    for name in backends:
        if name not in known_backends:
            raise BenchInputError(
                f"unknown backend {name!r}: expected one of {', '.join(known_backends)}"
            )
    sync = None
    if args.sync is not None:
        sync = split_list(args.sync, "--sync")
        for mode in sync:
            if mode not in known_syncs:
                raise BenchInputError(
                    f"unknown sync {mode!r}: expected one of {', '.join(known_syncs)}"
                )
    nodes = None if args.nodes is None else _parse_nodes(args.nodes)
    algorithms = None if args.algorithm is None else _parse_algorithms(args.algorithm)
    timeout = None
    if args.timeout is not None:
        try:
            timeout = float(args.timeout)
        except ValueError:
            raise BenchInputError(f"--timeout {args.timeout!r} is not a number") from None
        if not (timeout > 0 and math.isfinite(timeout)):
            raise BenchInputError(
                f"--timeout must be a positive number of seconds, got {args.timeout}"
            )
    return BenchConfig(
        **vars(sweep),
        backends=backends,
        nodes=nodes,
        sync=sync,
        timeout=timeout,
        options=options,
        dtypes=tuple(np.dtype(name) for name in dtypes),
        ops=ops,
        average=average,
        algorithms=algorithms,
    )


def _parse_algorithms(text: str) -> tuple[str, ...]:
    names = split_list(text, "--algorithm")
    known = library_algorithms()
    for name in names:
        if name not in known:
            raise BenchInputError(f"unknown algorithm {name!r}: expected one of {', '.join(known)}")
    return names


def _all_or_one(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``-d all`` / ``-o all`` (nccl-tests): every type and op; the first stands in for
    the sweep's checks, which then run again for each pair."""
    dtypes = ALL_DTYPES if args.dtype.lower() == "all" else (args.dtype,)
    ops = tuple(OPS) if args.op.lower() == "all" else (args.op,)
    args.dtype, args.op = dtypes[0], ops[0]
    return dtypes, ops
