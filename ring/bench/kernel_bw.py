"""``python -m ring.bench kernel-bw``: the reduction kernel's throughput against size.

The original study's single-GPU sweep (``gpu_kernel_bandwidth``), not a ring measurement:
at each size S one device runs the kernel the GPU ring launches for a received chunk
(``dst op= src``: ours from :mod:`ring.gpu.kernels`, and CuPy's ufunc for the op, one row
each, column ``kernel``; ``--kernel`` picks) and, beside them, a device-to-device copy of
the same S bytes.  A dtype our kernel does not cover gets only the ufunc's row.  Each is
timed per launch with CUDA events on one stream, ``-w`` warm-ups then ``-n`` timed
launches; the median gives

* ``kernel_GBps`` = 3·S / t (two reads and one write per element),
* ``copy_GBps`` = 2·S / t (one read and one write per element),
* ``kernel_vs_copy`` = their ratio: how close the kernel gets to moving bytes at the
  speed the device copies them.

With ``-c 1`` (the default) the first launch at every size is checked on the host against
the op computed in a wide type; ``wrong`` counts the elements off.  Writes FILE.csv and
FILE.json (environment, the device's ceilings, the arguments) with ``--out FILE.csv``.
Exit 0 ok, 1 wrong elements, 2 bad input or no GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .._optional import MissingDependencyError
from ..gpu.kernels import reducer
from . import data
from .ceilings import ceiling_bytes
from .cli import (
    BenchInputError,
    BenchParser,
    add_sweep_arguments,
    int_flag,
    parse_sweep,
    split_list,
)
from .environment import collect_environment, git_commit, utc_now
from .gpu_ceilings import (
    check_cupy_dtype,
    check_device_memory,
    cupy_or_input_error,
    device_count_or_input_error,
    event_times_ms,
    measure_gpu_ceilings,
)
from .nccl_compat import format_float
from .results import SCHEMA, TIME_COLUMNS, columns_of, write_result_pair

__all__ = ["COLUMNS", "kernel_bw_main", "main", "measure_size"]

COLUMNS = (
    "device",
    "gpu_name",
    "dtype",
    "op",
    "kernel",
    "bytes",
    "count",
    "iters",
    *TIME_COLUMNS,
    "kernel_GBps",
    "copy_time_us",
    "copy_GBps",
    "kernel_vs_copy",
    "wrong",
)

HEADER = (
    "#       size        count      type   redop kernel    kernel    kernel      copy      copy"
    "  kernel/  #wrong\n"
    "#        (B)   (elements)                               (us)    (GB/s)      (us)    (GB/s)"
    "     copy"
)
KERNELS = ("ring", "ufunc")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = BenchParser(
        prog="python -m ring.bench kernel-bw",
        description=(
            "Throughput of the GPU ring's reduction kernel (dst op= src: 2 reads + 1 write "
            "per element) against size, beside a device-to-device copy of the same size."
        ),
    )
    add_sweep_arguments(parser, max_default="1G", per="buffer", calls="launches")
    parser.add_argument("--device", default="0", help="CUDA device id (default 0)")
    parser.add_argument(
        "--kernel",
        default="ring,ufunc",
        help="which reduction kernels to time: ring (ours, ring.gpu.kernels), ufunc "
        "(CuPy's); a comma list (default ring,ufunc)",
    )
    args = parser.parse_args(argv)
    sweep = parse_sweep(args)
    for name, value in vars(sweep).items():
        setattr(args, name, value)
    args.device = int_flag(args.device, "--device", 0)
    args.kernels = split_list(args.kernel, "--kernel")
    unknown = [k for k in args.kernels if k not in KERNELS]
    if unknown:
        raise BenchInputError(
            f"--kernel {args.kernel!r}: unknown {unknown}; expected a comma list of "
            f"{', '.join(KERNELS)}"
        )
    return args


def reducers(cupy, args) -> list:
    """One reduction per kernel asked for; a kernel that falls back to the ufunc joins the
    ufunc's row instead of measuring it twice."""
    chosen = [reducer(cupy, args.op, args.dtype, kernel=k) for k in args.kernels]
    kinds: dict[str, Any] = {}
    for r in chosen:
        kinds.setdefault(r.kind, r)
    return list(kinds.values())


def measure_size(cupy, args, count: int, gpu_name: str | None, kernels) -> list[dict]:
    """One size on the current device: the copy once, then each kernel checked and timed."""
    runtime = cupy.cuda.runtime
    nbytes = count * args.dtype.itemsize
    stream = cupy.cuda.Stream(non_blocking=True)
    src = cupy.asarray(data.make_input(args.seed, 2, count, args.dtype, 1))
    copy_dst = cupy.empty_like(src)

    def copy():
        runtime.memcpyAsync(
            copy_dst.data.ptr, src.data.ptr, nbytes, runtime.memcpyDeviceToDevice, stream.ptr
        )

    copy_median = float(
        np.median(1e3 * event_times_ms(cupy, copy, stream, args.iters, args.warmup))
    )
    rows = [_measure_kernel(cupy, args, count, kernel, stream) for kernel in kernels]
    copy_gbps = 2 * nbytes / copy_median / 1e3 if copy_median > 0 else None
    for row in rows:
        kernel_gbps = row["kernel_GBps"]
        row.update(
            device=args.device,
            gpu_name=gpu_name,
            copy_time_us=copy_median,
            copy_GBps=copy_gbps,
            kernel_vs_copy=kernel_gbps / copy_gbps if kernel_gbps and copy_gbps else None,
        )
    return rows


def _measure_kernel(cupy, args, count: int, kernel, stream) -> dict:
    dtype, op = args.dtype, args.op
    nbytes = count * dtype.itemsize
    first = data.make_input(args.seed, 2, count, dtype, 0)
    second = data.make_input(args.seed, 2, count, dtype, 1)
    dst, src = cupy.asarray(first), cupy.asarray(second)
    cupy.cuda.Device().synchronize()

    def reduce():
        kernel(dst, src, stream)

    wrong = None
    if args.check:
        reduce()
        stream.synchronize()
        expected = data.reference(args.seed, 2, count, dtype, op, {0: first, 1: second})
        wrong = data.count_wrong(cupy.asnumpy(dst), expected, data.tolerance(dtype, 2))
    kernel_us = 1e3 * event_times_ms(cupy, reduce, stream, args.iters, args.warmup)
    stream.synchronize()
    lo, p25, median, p75, hi = np.percentile(kernel_us, [0, 25, 50, 75, 100])
    return {
        "dtype": dtype.name,
        "op": op,
        "kernel": kernel.kind,
        "bytes": nbytes,
        "count": count,
        "iters": args.iters,
        "time_us": float(median),
        "time_us_min": float(lo),
        "time_us_p25": float(p25),
        "time_us_p75": float(p75),
        "time_us_max": float(hi),
        "kernel_GBps": 3 * nbytes / median / 1e3 if median > 0 else None,
        "wrong": wrong,
    }


def table_line(row: dict) -> str:
    wrong = "N/A" if row["wrong"] is None else str(row["wrong"])
    return (
        f"{row['bytes']:>12} {row['count']:>12} {row['dtype']:>9} {row['op']:>7} "
        f"{row['kernel']:>6} "
        f"{format_float(row['time_us'], 9)} {format_float(row['kernel_GBps'], 9)} "
        f"{format_float(row['copy_time_us'], 9)} {format_float(row['copy_GBps'], 9)} "
        f"{format_float(row['kernel_vs_copy'], 8, 3)} {wrong:>7}"
    )


def _gpu_name(cupy, device: int) -> str | None:
    name = cupy.cuda.runtime.getDeviceProperties(device).get("name")
    return name.decode() if isinstance(name, bytes) else name


def kernel_bw_main(argv: list[str], command: list[str]) -> int:
    """Run the sweep; raise :class:`BenchInputError` (exit 2) on bad input or no GPU."""
    args = parse_args(argv)
    cupy = _checked_cupy(args)
    start_time = utc_now()
    environment = collect_environment(None)
    commit, dirty = git_commit()
    name = _gpu_name(cupy, args.device)
    print(
        f"# ring.bench kernel-bw: {args.dtype.name} {args.op} on device {args.device} ({name}), "
        f"sizes {args.sizes[0]}..{args.sizes[-1]} B (x{args.step_factor:g}), warmup "
        f"{args.warmup}, iters {args.iters}, check {int(args.check)}",
        flush=True,
    )
    rows, ceilings, kernels = _sweep(cupy, args, name)
    wrong_total = sum(row["wrong"] or 0 for row in rows)
    checked = "not checked (-c 0)" if not args.check else str(wrong_total)
    print(f"# Wrong elements: {checked}", flush=True)
    if args.out is not None:
        out = Path(args.out)
        document = {
            "schema": SCHEMA,
            "mode": "kernel-bw",
            "command": list(command),
            "start_time": start_time,
            "end_time": utc_now(),
            "git_commit": commit,
            "git_dirty": dirty,
            "environment": environment,
            "ceilings": ceilings,
            "config": _config_document(args, kernels, out),
            "wrong_total": wrong_total if args.check else None,
        }
        write_result_pair(out, rows, columns_of(rows, COLUMNS), document)
        print(f"# Wrote {out} and {out.with_suffix('.json')}", flush=True)
    if wrong_total:
        print(f"ring.bench kernel-bw: {wrong_total} wrong elements", file=sys.stderr)
        return 1
    return 0


def _checked_cupy(args: argparse.Namespace):
    """CuPy, once the device exists and the largest size fits on it."""
    cupy = cupy_or_input_error("kernel-bw")
    available = device_count_or_input_error("kernel-bw")
    if args.device >= available:
        raise BenchInputError(
            f"--device {args.device} does not exist: this machine has {available} CUDA "
            f"device(s), ids 0..{available - 1}"
        )
    check_cupy_dtype("kernel-bw", args.dtype)
    # The copy's source and destination, and the kernel's two operands, at the largest size.
    check_device_memory("kernel-bw", cupy, {args.device: 4 * args.sizes[-1]})
    return cupy


def _sweep(cupy, args: argparse.Namespace, name: str | None) -> tuple[list[dict], dict, list]:
    """The device's ceilings, then every size: the rows, the ceilings, the kernels timed."""
    rows = []
    with cupy.cuda.Device(args.device):
        ceilings = measure_gpu_ceilings(
            ceiling_bytes(args.max_bytes, args.dtype.itemsize),
            args.dtype,
            args.op,
            [args.device],
        )
        print(
            f"# Ceilings at {ceilings['gpu_buffer_bytes']} B (bytes read + written): copy "
            f"{ceilings['gpu_copy_GBps'][str(args.device)]:.1f} GB/s, reduction kernel "
            f"{ceilings['gpu_reduce_GBps'][str(args.device)]:.1f} GB/s",
            flush=True,
        )
        print(HEADER, flush=True)
        kernels = reducers(cupy, args)
        for size in args.sizes:
            for row in measure_size(cupy, args, size // args.dtype.itemsize, name, kernels):
                rows.append(row)
                print(table_line(row), flush=True)
            cupy.get_default_memory_pool().free_all_blocks()
    return rows, ceilings, kernels


def _config_document(args: argparse.Namespace, kernels: list, out: Path) -> dict:
    return {
        "min_bytes": args.min_bytes,
        "max_bytes": args.max_bytes,
        "step_factor": args.step_factor,
        "iters": args.iters,
        "warmup": args.warmup,
        "check": int(args.check),
        "dtype": args.dtype.name,
        "op": args.op,
        "device": args.device,
        "kernels": [k.kind for k in kernels],
        "seed": args.seed,
        "out": str(out),
        "sizes": list(args.sizes),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    command = list(sys.orig_argv) if argv is None else ["ring-bench", "kernel-bw", *args]
    try:
        return kernel_bw_main(args, command)
    except (BenchInputError, MissingDependencyError) as exc:
        print(f"ring.bench kernel-bw: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
