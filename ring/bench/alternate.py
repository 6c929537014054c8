"""``python -m ring.bench alternate``: a comparison that cannot share one launch.

The threaded ring runs in one process; ``MPI_Allreduce`` needs ``mpirun -n N``.  Their ratio
therefore comes from separate launches, and a shared machine drifts between launches.  So
the two launches alternate, ``--rounds`` times, in the order A B B A A B ... (each backend
first as often as second), and the ratio time(B) / time(A) is given per size as the median
over rounds with its spread (min and max): a ratio whose spread straddles 1 says nothing.

    python -m ring.bench alternate --nodes 2 --rounds 3 --launcher "mpirun --oversubscribe" \\
        --out results/compare/cpu_vs_mpi-allreduce_n2_float32.csv -- -b 1K -e 64M -f 16

writes the CSV (one row per size), its JSON (both commands, every launch's ceilings) and
keeps each launch's own result files under ``<out stem>.launches/``.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from .cli import BenchInputError, BenchParser, int_flag
from .environment import utc_now
from .launches import launcher_words
from .results import SCHEMA, read_csv, write_result_pair

__all__ = ["alternate_main"]

COLUMNS = (
    "ours",
    "peer",
    "nodes",
    "dtype",
    "op",
    "bytes",
    "rounds",
    "time_ours_us",
    "time_peer_us",
    "ratio",
    "ratio_min",
    "ratio_max",
)


def _parser() -> BenchParser:
    parser = BenchParser(prog="python -m ring.bench alternate", description=__doc__)
    add = parser.add_argument
    add("--ours", default="cpu", help="single-process backend (default cpu)")
    add("--sync", default="pairwise", help="its sync mode (default pairwise)")
    add(
        "--peer", default="mpi-allreduce", help="backend launched under MPI (default mpi-allreduce)"
    )
    add("--launcher", default="mpirun", help="the MPI launcher; -n N is appended (default mpirun)")
    add("--nodes", default="2", help="N: threads of ours, ranks of the peer (default 2)")
    add("--rounds", default="3", help="launches of each backend, alternated (default 3)")
    add("--out", required=True, help="FILE.csv (and FILE.json beside it)")
    add("sweep", nargs=argparse.REMAINDER, help="-- then the harness's sweep flags")
    return parser


def _launches(args, nodes: int, folder: Path):
    sweep = [a for a in args.sweep if a != "--"]
    harness = [sys.executable, "-m", "ring.bench"]
    ours = [*harness, "--backend", args.ours, "--sync", args.sync, "--nodes", str(nodes), *sweep]
    launcher = launcher_words(args.launcher)
    peer = [*launcher, "-n", str(nodes), *harness, "--backend", args.peer, *sweep]

    def command(which: str, round_: int) -> list[str]:
        base = ours if which == "ours" else peer
        return [*base, "--out", str(folder / f"{which}_round{round_}.csv")]

    return command


def _order(rounds: int) -> list[tuple[str, int]]:
    """A B B A A B ...: each side goes first in half the rounds."""
    order = []
    for r in range(rounds):
        pair = ("ours", "peer") if r % 2 == 0 else ("peer", "ours")
        order += [(which, r) for which in pair]
    return order


def _times(path: Path) -> dict[tuple, float]:
    _, rows = read_csv(path)
    return {(r["dtype"], r["op"], int(r["bytes"])): float(r["time_us"]) for r in rows}


def alternate_main(argv: list[str], command: list[str]) -> int:
    args = _parser().parse_args(argv)
    nodes = int_flag(args.nodes, "--nodes", 2)
    rounds = int_flag(args.rounds, "--rounds", 2)
    out = Path(args.out)
    if out.suffix != ".csv":
        raise BenchInputError(f"--out {args.out!r} must name a .csv file (the JSON goes beside it)")
    folder = out.with_suffix(".launches")
    make = _launches(args, nodes, folder)
    folder.mkdir(parents=True, exist_ok=True)
    start = utc_now()
    launched = []
    for which, round_ in _order(rounds):
        argv_ = make(which, round_)
        print(f"# round {round_ + 1}/{rounds}: {shlex.join(argv_)}", flush=True)
        done = subprocess.run(argv_, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-2000:] + done.stderr[-2000:], file=sys.stderr)
            print(f"ring.bench alternate: {which} launch failed (exit {done.returncode})",
                  file=sys.stderr)  # fmt: skip
            return 1
        launched.append({"which": which, "round": round_, "command": argv_})
    ours = [_times(folder / f"ours_round{r}.csv") for r in range(rounds)]
    peer = [_times(folder / f"peer_round{r}.csv") for r in range(rounds)]
    rows = []
    for key in sorted(set.intersection(*(set(t) for t in ours + peer)), key=lambda k: k[2]):
        ratios = np.array([p[key] / o[key] for o, p in zip(ours, peer, strict=True)])
        rows.append(
            {
                "ours": f"{args.ours} {args.sync}",
                "peer": args.peer,
                "nodes": nodes,
                "dtype": key[0],
                "op": key[1],
                "bytes": key[2],
                "rounds": rounds,
                "time_ours_us": float(np.median([o[key] for o in ours])),
                "time_peer_us": float(np.median([p[key] for p in peer])),
                "ratio": float(np.median(ratios)),
                "ratio_min": float(ratios.min()),
                "ratio_max": float(ratios.max()),
            }
        )
    document = {
        "schema": SCHEMA,
        "kind": "alternated launches",
        "command": list(command),
        "start_time": start,
        "end_time": utc_now(),
        "launches": launched,
    }
    write_result_pair(out, rows, COLUMNS, document)
    for row in rows:
        print(
            f"{row['bytes']:>12} {row['ratio']:8.3f}x [{row['ratio_min']:.3f}x, "
            f"{row['ratio_max']:.3f}x] time({args.peer}) / time({args.ours})"
        )
    print(f"# Wrote {out} and {out.with_suffix('.json')}")
    return 0
