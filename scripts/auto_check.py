"""How close ``ring.allreduce(b, algorithm="auto")`` comes to the best fixed plan, per size.

    .venv/bin/python scripts/auto_check.py [--nodes 2,4] [--sizes 1K,64K,1M,16M,64M]

In one process, with empty wisdom (``RING_WISDOM=off``: plans in memory only): for each N
and size, the module function plans its shape (it is called until the wisdom holds the
plan), then every fixed algorithm x executor runs on a held ``CpuCommunicator`` of its own,
all on buffers of their own, repeated on the same buffer objects.  A screen times a loop of
every contender in turn, for a few rounds, and names the fastest fixed one by its median;
then auto and that one take turns, loop against loop, and the ratio is the median of the
pairs' ratios (auto / best; 1.0 is as fast): a machine whose speed drifts moves both sides
of a pair alike.  It prints both medians, the ratio with its range, and the two plans.
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


def check(nodes: int, nbytes: int, rounds: int, pairs_of: int) -> tuple[list, str, tuple]:
    """(auto's and the best fixed one's seconds, pair by pair; the best fixed one's name;
    auto's plan)."""
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
    fixed = {n: statistics.median(t) for n, t in times.items() if n != "auto"}
    best = min(fixed, key=fixed.__getitem__)
    pairs = []
    for _ in range(pairs_of):
        pairs.append(
            (_loop(contenders["auto"], calls["auto"]), _loop(contenders[best], calls[best]))
        )
    for comm in held:
        comm.close()
    return pairs, best, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,4")
    parser.add_argument("--sizes", default="1K,16K,256K,4M,64M", help="bytes per node")
    parser.add_argument("--rounds", type=int, default=3, help="of the screen")
    parser.add_argument("--pairs", type=int, default=15, help="auto against the best")
    args = parser.parse_args()
    os.environ[store.WISDOM_ENV] = "off"  # read on first use: plans in memory only
    head = f"{'N':>2} {'bytes':>9} {'auto us':>10} {'best us':>10} {'ratio':>6} {'range':>11}"
    print(f"{head}  best fixed; auto's plan")
    for nodes in (int(n) for n in args.nodes.split(",")):
        for nbytes in (_bytes(s) for s in args.sizes.split(",")):
            pairs, name, plan = check(nodes, nbytes, args.rounds, args.pairs)
            ratios = [a / b for a, b in pairs]
            auto = statistics.median(a for a, _ in pairs)
            best = statistics.median(b for _, b in pairs)
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            planned = "/".join(map(str, plan))
            print(
                f"{nodes:>2} {nbytes:>9} {auto * 1e6:>10.1f} {best * 1e6:>10.1f}"
                f" {statistics.median(ratios):>6.2f} {spread:>11}  {name}; {planned}",
                flush=True,
            )


if __name__ == "__main__":
    main()
