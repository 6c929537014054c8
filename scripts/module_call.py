"""What ``ring.allreduce`` costs against a held communicator's call, on the same plan.

    .venv/bin/python scripts/module_call.py --nodes 2 --bytes 1024 [--rounds 9]

Both call ``max`` with ``algorithm="auto"`` on buffers of their own, repeated on the same
buffer objects (a training loop's habit): the module function through the communicator
it caches, the held one as ``comm.allreduce(buffers, "max")``.  The held communicator is
made after the module function's has planned and takes its plan, so both run the same
one (the plans kept in memory only: ``RING_WISDOM=off``).  Each round times a loop of
each in turn; the script prints the medians and the median of the rounds' ratios, with
their range.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import ring
from ring.planning import store


def _loop(call, buffers: list, calls: int) -> float:
    """Seconds per call of ``calls`` calls of ``call(buffers)``."""
    started = time.perf_counter()
    for _ in range(calls):
        call(buffers)
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--bytes", type=int, default=1024, help="per node, float32")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20000, help="per loop")
    args = parser.parse_args()
    os.environ[store.WISDOM_ENV] = "off"  # read on first use: plans in memory only
    n = max(1, args.bytes // 4)
    mine, held_buffers = ([np.full(n, 0.5, np.float32) for _ in range(args.nodes)] for _ in "ab")

    def module(b):
        ring.allreduce(b, "max", algorithm="auto")

    for _ in range(1000):  # plans the shape and warms the bound call
        module(mine)
    with ring.CpuCommunicator(args.nodes, algorithm="auto") as comm:
        if comm.measuring("allreduce", held_buffers, "max"):
            raise SystemExit("the held communicator would plan again: not the same plan")
        plan = comm.planned("allreduce", held_buffers, "max")

        def held(b):
            comm.allreduce(b, "max")

        for _ in range(1000):
            held(held_buffers)
        rounds = [
            (_loop(module, mine, args.calls), _loop(held, held_buffers, args.calls))
            for _ in range(args.rounds)
        ]
    ratios = [m / h for m, h in rounds]
    print(
        f"N={args.nodes} {args.bytes} B: ring.allreduce"
        f" {statistics.median(m for m, _ in rounds) * 1e6:.2f} us,"
        f" held {statistics.median(h for _, h in rounds) * 1e6:.2f} us;"
        f" ratio {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f});"
        f" plan {plan}"
    )


if __name__ == "__main__":
    main()
