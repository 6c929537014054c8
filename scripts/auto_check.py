"""How close ``ring.allreduce(b, algorithm="auto")`` comes to the best fixed plan, per size.

    .venv/bin/python scripts/auto_check.py [--nodes 2,4] [--sizes 1K,64K,1M,16M,64M]

In one process, with empty wisdom (``RING_WISDOM=off``: plans in memory only): for each N
and size, the module function plans its shape (it is called until the wisdom holds the
plan), then every fixed algorithm x executor runs on a held ``CpuCommunicator`` of its own,
all on buffers of their own, repeated on the same buffer objects.  Each round times a loop
of every contender in turn; a contender's time is its median over the rounds.  It prints
auto's time, the best fixed one's and their ratio (auto / best; 1.0 is as fast).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import ring
from ring.cpu import EXECUTORS, CpuCommunicator
from ring.planning import race, store
from ring.schedule import algorithms_of

SUFFIX = {"K": 1 << 10, "M": 1 << 20}


def _bytes(text: str) -> int:
    return int(text[:-1]) * SUFFIX[text[-1]] if text[-1] in SUFFIX else int(text)


def _loop(call, calls: int) -> float:
    """Seconds per call of ``calls`` calls."""
    started = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - started) / calls


def _plan_auto(nodes: int, buffers: list) -> tuple:
    """Call the module function until its shape is planned; the plan."""
    key = race.shape_key(
        "cpu", "allreduce", nodes, buffers[0].dtype.str, "sum", buffers[0].nbytes,
        (None, None, "pairwise"),
    )  # fmt: skip
    for _ in range(100000):
        ring.allreduce(buffers, algorithm="auto")
        plan = store.wisdom().get(key)
        if plan is not None:
            return plan
    raise SystemExit(f"N={nodes} {buffers[0].nbytes} B: auto never settled")


def check(nodes: int, nbytes: int, rounds: int) -> tuple[float, float, str, tuple]:
    """(auto's seconds, the best fixed seconds, the best fixed's name, auto's plan)."""
    count = nbytes // 4

    def fresh() -> list:
        return [np.zeros(count, np.float32) for _ in range(nodes)]

    mine = fresh()
    plan = _plan_auto(nodes, mine)
    contenders = {"auto": lambda: ring.allreduce(mine, algorithm="auto")}
    held = []
    for algorithm in algorithms_of("allreduce"):
        for executor in EXECUTORS:
            comm = CpuCommunicator(nodes, algorithm=algorithm, executor=executor)
            held.append(comm)
            theirs = fresh()
            contenders[f"{algorithm}/{executor}"] = lambda c=comm, b=theirs: c.allreduce(b)
    calls = {}
    for name, call in contenders.items():  # warm, and calls enough for ~20 ms a loop
        call()
        calls[name] = max(1, int(0.02 / max(_loop(call, 3), 1e-7)))
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, call in contenders.items():
            times[name].append(_loop(call, calls[name]))
    for comm in held:
        comm.close()
    median = {name: statistics.median(t) for name, t in times.items()}
    fixed = {name: t for name, t in median.items() if name != "auto"}
    best = min(fixed, key=fixed.__getitem__)
    return median["auto"], fixed[best], best, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--sizes", default="1K,16K,256K,4M,64M", help="bytes per node")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    os.environ[store.WISDOM_ENV] = "off"  # read on first use: plans in memory only
    head = f"{'N':>2} {'bytes':>9} {'auto us':>10} {'best us':>10} {'ratio':>6}"
    print(f"{head}  best fixed; auto's plan")
    for nodes in (int(n) for n in args.nodes.split(",")):
        for nbytes in (_bytes(s) for s in args.sizes.split(",")):
            auto, best, name, plan = check(nodes, nbytes, args.rounds)
            print(
                f"{nodes:>2} {nbytes:>9} {auto * 1e6:>10.1f} {best * 1e6:>10.1f}"
                f" {auto / best:>6.2f}  {name}; {'/'.join(map(str, plan))}",
                flush=True,
            )


if __name__ == "__main__":
    main()
