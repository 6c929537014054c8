"""``python -m ring.bench cpu-perf``: how close the CPU backend gets to this machine's limits.

* Large buffers: one allreduce of S bytes per node does 3(N-1)·S bytes of in-place adds in
  reduce-scatter and (N-1)·S bytes of copies in all-gather, which move 3 bytes per byte (2 at
  or above glibc's non-temporal memcpy threshold).  The model is the time that traffic takes
  at the add and copy ceilings of :mod:`ring.bench.ceilings` (STREAM-like, all cores, best of
  several trials, the same byte convention), measured in the same run; the ratio
  measured/model is reported.
* Small buffers: the median per-call time over many calls with the persistent threads,
  divided by the 2(N-1) ring steps, next to the round trip of two threads handing a lock
  back and forth (the floor for any design that wakes a sleeping thread per step).

Timings drift on shared machines: the ratios within one run are what to compare.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import numpy as np

from ..cpu import SYNC_MODES, CpuCommunicator
from .backends.cpu import ring_traffic_bytes
from .ceilings import measure_cpu_ceilings
from .cli import BenchParser, int_flag, split_list

__all__ = ["cpu_perf_main", "large", "lock_round_trip", "small"]


def _median_time(fn, repeats: int, before=None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def lock_round_trip(rounds: int = 5000) -> float:
    """Seconds for one wake-up of another thread and back, with raw locks."""
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()

    def echo():
        for _ in range(rounds):
            ping.acquire()
            pong.release()

    thread = threading.Thread(target=echo)
    thread.start()
    start = time.perf_counter()
    for _ in range(rounds):
        ping.release()
        pong.acquire()
    elapsed = time.perf_counter() - start
    thread.join()
    return elapsed / rounds


def large(nodes: int, sync: str, nbytes: int, repeats: int, ceilings: dict) -> dict:
    count = nbytes // 4
    rng = np.random.default_rng(nodes)
    inputs = [rng.uniform(0.5, 1.5, count).astype(np.float32) for _ in range(nodes)]
    buffers = [a.copy() for a in inputs]

    def restore():
        for buf, src in zip(buffers, inputs, strict=True):
            np.copyto(buf, src)

    with CpuCommunicator(nodes, sync=sync) as comm:
        comm.allreduce(buffers)
        t = _median_time(lambda: comm.allreduce(buffers), repeats, before=restore)
    nbytes = count * 4
    add_bytes = 3 * (nodes - 1) * nbytes
    traffic = ring_traffic_bytes(nbytes, nodes)
    copy_bytes = traffic - add_bytes
    model = add_bytes / ceilings["add_GBps"] / 1e9 + copy_bytes / ceilings["copy_GBps"] / 1e9
    return {"time_s": t, "model_s": model, "ratio": t / model, "traffic_GBps": traffic / t / 1e9}


def small(nodes: int, sync: str, nbytes: int, calls: int) -> dict:
    buffers = [np.full(nbytes // 4, 1.0 / nodes, np.float32) for _ in range(nodes)]
    with CpuCommunicator(nodes, sync=sync) as comm:
        for _ in range(50):
            comm.allreduce(buffers, "max")
        t = _median_time(lambda: comm.allreduce(buffers, "max"), calls)
    return {"time_s": t, "per_step_s": t / (2 * (nodes - 1))}


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = BenchParser(
        prog="python -m ring.bench cpu-perf",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", default="2,4", help="comma list of node counts (default 2,4)")
    parser.add_argument("--large-mib", default="256", help="MiB per node of the large calls")
    parser.add_argument("--large-repeats", default="7", help="large calls timed (median)")
    parser.add_argument("--small-bytes", default="1024", help="bytes per node of the small calls")
    parser.add_argument("--small-calls", default="2000", help="small calls timed (median)")
    args = parser.parse_args(argv)
    args.node_counts = [int_flag(n, "--nodes", 2) for n in split_list(args.nodes, "--nodes")]
    args.large_mib = int_flag(args.large_mib, "--large-mib", 1)
    args.large_repeats = int_flag(args.large_repeats, "--large-repeats", 1)
    args.small_bytes = int_flag(args.small_bytes, "--small-bytes", 4)
    args.small_calls = int_flag(args.small_calls, "--small-calls", 1)
    return args


def _print_large(args: argparse.Namespace, ceilings: dict) -> None:
    nbytes = args.large_mib << 20
    print(f"\nallreduce of {args.large_mib} MiB float32 per node (median of {args.large_repeats}):")
    print(f"{'N':>3} {'sync':>9} {'time ms':>9} {'model ms':>9} {'ratio':>6} {'traffic GB/s':>13}")
    for nodes in args.node_counts:
        for sync in SYNC_MODES:
            r = large(nodes, sync, nbytes, args.large_repeats, ceilings)
            print(
                f"{nodes:>3} {sync:>9} {r['time_s'] * 1e3:>9.3g} {r['model_s'] * 1e3:>9.3g} "
                f"{r['ratio']:>6.2f} {r['traffic_GBps']:>13.2f}"
            )


def _print_small(args: argparse.Namespace) -> None:
    trip = lock_round_trip()
    print(
        f"\nallreduce of {args.small_bytes} B per node (median of {args.small_calls} calls); "
        f"lock round trip between two threads: {trip * 1e6:.1f} us"
    )
    print(f"{'N':>3} {'sync':>9} {'call us':>9} {'per step us':>12}")
    for nodes in args.node_counts:
        for sync in SYNC_MODES:
            r = small(nodes, sync, args.small_bytes, args.small_calls)
            print(f"{nodes:>3} {sync:>9} {r['time_s'] * 1e6:>9.1f} {r['per_step_s'] * 1e6:>12.1f}")


def cpu_perf_main(argv: list[str]) -> int:
    """Measure and print; raise :class:`~ring.bench.cli.BenchInputError` on bad flags."""
    args = _parse_args(argv)
    ceilings = measure_cpu_ceilings(np.dtype(np.float32))
    print(
        f"ceilings ({ceilings['threads']} threads, {ceilings['array_bytes'] >> 20} MiB arrays, "
        f"best of {ceilings['trials']}, bytes over the memory bus): "
        f"copy {ceilings['copy_GBps']:.2f}, add {ceilings['add_GBps']:.2f}, "
        f"triad {ceilings['triad_GBps']:.2f} GB/s"
    )
    _print_large(args, ceilings)
    _print_small(args)
    sys.stdout.flush()
    return 0
