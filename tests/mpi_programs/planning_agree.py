"""Run under ``mpirun -n N WISDOM_DIR`` (N >= 2): every planning input of ``auto`` is agreed
on before any rank acts on it.

Each disagreement (``auto`` on rank 0 and a given algorithm on the others; ``planning=``;
an invalid ``RING_PLAN_BUDGET`` on one rank; budgets that differ; rank 0 failing to read
its wisdom; rank 0 passing a tuple, a call measuring does not take) is called at 64 B
(within the pre-flight slot), 16 KB and 160 KB: every rank catches the same error and
checks that its buffer is untouched (``bad_input.run``).  Then wisdom files that cannot be
used (one nested past the parser's depth, on rank 0 or on rank 1; plans of rank 0 whose
choice this library cannot run) leave every rank's calls running and right, each against
NumPy's float64 sum.

Rank 0 prints one JSON object: ``{"nodes", "scenarios": {"NAME COUNT": [[type, message,
untouched], ...per rank]}, "wisdom": {NAME: [[ok, warned], ...per rank]}, "after": [per
rank]}``.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np
from bad_input import run
from mpi4py import MPI

import ring
from ring.mpi import DEFAULT_SEGMENT_BYTES, MpiRing
from ring.planning import race, store

world = MPI.COMM_WORLD
rank, nodes = world.Get_rank(), world.Get_size()
COUNTS = (8, 2000, 20000)  # float64: 64 B, 16 KB, 160 KB


def base(count: int) -> np.ndarray:
    return (np.arange(count) % 7 + 1 + rank).astype(np.float64)


def expected(count: int) -> np.ndarray:
    per_rank = [(np.arange(count) % 7 + 1 + r).astype(np.float64) for r in range(nodes)]
    return np.sum(per_rank, axis=0)


class Setting:
    """An environment variable set on the ranks ``on`` for the length of a ``with``."""

    def __init__(self, name: str, values: dict[int, str]):
        self.name, self.value = name, values.get(rank)

    def __enter__(self):
        self.before = os.environ.get(self.name)
        if self.value is not None:
            os.environ[self.name] = self.value

    def __exit__(self, *exc):
        os.environ.pop(self.name, None)
        if self.before is not None:
            os.environ[self.name] = self.before


def disagreements(report: dict) -> None:
    def auto_on_rank_0(buf):
        algorithm = "auto" if rank == 0 else "ring"
        ring.allreduce([buf], backend="mpi", algorithm=algorithm)

    def planning_differs(buf):
        with MpiRing(world, algorithm="auto", planning="estimate" if rank else "measure") as comm:
            comm.allreduce([buf])

    def on_a_new_ring(buf):
        with MpiRing(world, algorithm="auto") as comm:
            comm.allreduce([buf])

    def a_tuple_on_rank_0(buf):
        with MpiRing(world, algorithm="auto") as comm:
            comm.allreduce((buf,) if rank == 0 else [buf])

    def rank_0_cannot_plan(buf):
        def unreadable():
            raise OSError("the wisdom disk is gone")

        real = store.wisdom
        if rank == 0:
            store.wisdom = unreadable
        try:
            on_a_new_ring(buf)
        finally:
            store.wisdom = real

    scenarios = {
        "auto on rank 0": (auto_on_rank_0, None),
        "planning differs": (planning_differs, None),
        "budget bad on rank 1": (on_a_new_ring, Setting(race.BUDGET_ENV, {1: "-1"})),
        "budgets differ": (on_a_new_ring, Setting(race.BUDGET_ENV, {0: "1", 1: "2"})),
        "rank 0 cannot plan": (rank_0_cannot_plan, None),
        "a tuple on rank 0": (a_tuple_on_rank_0, None),
    }
    for name, (call, setting) in scenarios.items():
        for count in COUNTS:
            buf = base(count)
            with setting or Setting("RING_UNUSED", {}):
                key = f"{name} {count}"
                report["scenarios"][key] = run(None, key, lambda c=call, b=buf: c(b), buf)


def deep(path: Path) -> None:
    path.write_text("[" * 200_000)


def bogus(path: Path) -> None:
    """Rank 0's plans for each size's shape, none of them one the library can run."""
    plans = {}
    for count, choice in zip(COUNTS, (["bogus"], [], ["ring"] * 5), strict=True):
        shape = race.shape_key(
            "mpi", "allreduce", nodes, np.dtype(np.float64), "sum", count * 8,
            (DEFAULT_SEGMENT_BYTES, None, 0),
        )  # fmt: skip
        plans[shape] = {"backend": "mpi", "collective": "allreduce", "choice": choice}
    header = store.Wisdom.header()
    path.write_text(json.dumps({**header, "plans": plans}))


def spoiled_wisdom(report: dict, folder: Path) -> None:
    cases = {
        "deep on rank 0": (0, deep),
        "deep on rank 1": (1, deep),
        "bogus on rank 0": (0, bogus),
    }
    for name, (owner, spoil) in cases.items():
        path = folder / f"{name.replace(' ', '-')}-{rank}.json"
        if rank == owner:
            spoil(path)
        os.environ[store.WISDOM_ENV] = str(path)
        store.forget_process()
        ok, warned = True, False
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", store.WisdomWarning)
            try:
                with MpiRing(world, algorithm="auto") as comm:
                    for count in COUNTS:
                        for _ in range(12):  # past each shape's trial
                            buf = base(count)
                            comm.allreduce([buf])
                            ok = ok and bool(np.array_equal(buf, expected(count)))
            except Exception as exc:  # noqa: BLE001 - what each rank saw is the result
                ok = f"{type(exc).__name__}: {exc}"
        warned = any(issubclass(w.category, store.WisdomWarning) for w in said)
        report["wisdom"][name] = world.gather([ok, warned], root=0)


def main() -> int:
    folder = Path(sys.argv[1])
    os.environ[store.WISDOM_ENV] = str(folder / f"wisdom-{rank}.json")
    os.environ[race.BUDGET_ENV] = "0.05"
    store.forget_process()
    report: dict = {"nodes": nodes, "scenarios": {}, "wisdom": {}}
    disagreements(report)
    spoiled_wisdom(report, folder)
    report["after"] = world.gather(still_running(), root=0)
    if rank == 0:
        print(json.dumps(report))
    return 0


def still_running() -> bool:
    """Whether this rank's calls still run and are right, by a given algorithm and by auto
    (every rank makes both calls, whatever the first gave)."""
    right = []
    for algorithm in ("ring", "auto"):
        buf = base(COUNTS[-1])
        ring.allreduce([buf], backend="mpi", algorithm=algorithm)
        right.append(bool(np.array_equal(buf, expected(COUNTS[-1]))))
    return all(right)


if __name__ == "__main__":
    sys.exit(main())
