"""The size sweep that every measuring subcommand shares (``-b -e -i -f -n -w -c -d -o``,
under nccl-tests' long names too, plus ``--out`` and ``--seed``): the flags, their checks and
the sizes they give."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..ops import ARITHMETIC, resolve_op
from .flags import BenchInputError, int_flag, parse_size
from .nccl_compat import linear_sizes

__all__ = [
    "DTYPE_ALIASES",
    "MAX_SIZES",
    "Sweep",
    "add_sweep_arguments",
    "harness_op",
    "parse_dtype",
    "parse_out",
    "parse_sweep",
    "sizes_of",
    "sweep_sizes",
]

MAX_SIZES = 1000

# nccl-tests' type names next to NumPy's own.
DTYPE_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "uint": "uint32",
    "char": "int8",
    "int8": "int8",
    "uint8": "uint8",
}


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


def harness_op(op: str, dtype: np.dtype) -> None:
    """Refuse, as input, an op the harness does not sweep or the dtype does not allow: the
    harness compares with NCCL and MPI peers, over NCCL's five ops."""
    try:
        resolve_op(op, dtype)
    except (TypeError, ValueError) as exc:
        raise BenchInputError(str(exc)) from None
    if op not in ARITHMETIC:
        raise BenchInputError(
            f"-o/--op {op!r}: the harness sweeps {', '.join(ARITHMETIC)} (NCCL's ops, which "
            "every peer has); bitwise ops are the library's: ring.allreduce(buffers, 'band')"
        )


def parse_dtype(text: str) -> np.dtype:
    """The NumPy type that ``text`` names (nccl-tests' names too), or a one-line error."""
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


def sizes_of(min_bytes, max_bytes, step_factor, step_bytes, itemsize) -> tuple[int, ...]:
    """The sweep's sizes: linear with -i, else geometric with -f."""
    if step_bytes is None:
        return sweep_sizes(min_bytes, max_bytes, step_factor, itemsize)
    if (max_bytes - min_bytes) // step_bytes >= MAX_SIZES:
        raise BenchInputError(
            f"the sweep has more than {MAX_SIZES} sizes: raise -i/--step-bytes or narrow -b/-e"
        )
    return tuple(linear_sizes(min_bytes, max_bytes, step_bytes, itemsize))


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
    add("-o", "--op", default="sum", help=f"reduction: {', '.join(ARITHMETIC)} (default sum)")
    add("--out", default=None, help="write FILE.csv and FILE.json beside it")
    add("--seed", default="0", help="seed of the random inputs (default 0)")


def parse_sweep(args: argparse.Namespace) -> Sweep:
    """Check the shared sweep flags; raise :class:`BenchInputError` on anything wrong."""
    min_bytes = parse_size(args.min_bytes)
    max_bytes = parse_size(args.max_bytes)
    step_factor, step_bytes = _parse_step(args)
    iters = int_flag(args.iters, "-n/--iters", 1)
    warmup = int_flag(args.warmup, "-w/--warmup", 0)
    check = int_flag(args.check, "-c/--check", 0)
    seed = int_flag(args.seed, "--seed", 0)
    dtype = parse_dtype(args.dtype)
    harness_op(args.op, dtype)
    if min_bytes < dtype.itemsize:
        raise BenchInputError(
            f"-b/--min-bytes must hold at least one {dtype.name} element "
            f"({dtype.itemsize} bytes), got {min_bytes}"
        )
    if min_bytes > max_bytes:
        raise BenchInputError(
            f"-b/--min-bytes ({args.min_bytes}) is larger than -e/--max-bytes ({args.max_bytes})"
        )
    out = None if args.out is None else parse_out(args.out)
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


def _parse_step(args: argparse.Namespace) -> tuple[float, int | None]:
    """-f/--step-factor and -i/--step-bytes: at most one of them, each in range."""
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
    return step_factor, step_bytes


def parse_out(text: str) -> Path:
    out = Path(text)
    if out.suffix != ".csv" or not out.stem:
        raise BenchInputError(f"--out {text!r} must name a .csv file (the JSON goes beside it)")
    if out.exists() and out.is_dir():
        raise BenchInputError(f"--out {text!r} is a directory")
    return out
