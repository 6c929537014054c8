"""What profiling costs: the CPU bench with and without ``nsys profile``, same run.

    python -m ring.nsys.overhead [--size 64M] [--nodes 4] [--iters 20] [--repeats 3]

Runs ``python -m ring.bench`` at one size, alternating plain and profiled runs
``--repeats`` times so that drift on a shared machine hits both alike, and prints each
run's median time, the ratio profiled / plain of the medians of those medians (the
target is at most 1.10) and the size of the ``.nsys-rep`` file.  Run it on a quiet
machine; on a busy one the ratio says more about the neighbours than about nsys.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from ..bench.outputs import file_problem
from ..bench.results import write_text_atomic
from .tool import NsysNotFoundError, profile_command, profile_paths, require_nsys

__all__ = ["measure_overhead"]


def _bench(size: str, nodes: int, iters: int, warmup: int, out: Path, extra: list[str]):
    return [
        sys.executable, "-m", "ring.bench", "--backend", "cpu", "--nodes", str(nodes),
        "-b", size, "-e", size, "-n", str(iters), "-w", str(warmup), "--out", str(out),
        *extra,
    ]  # fmt: skip


def _median_us(csv_path: Path) -> float:
    with csv_path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if len(rows) != 1:
        raise RuntimeError(f"{csv_path}: expected one result row, found {len(rows)}")
    if rows[0].get("wrong") not in (None, "", "0"):
        raise RuntimeError(f"{csv_path}: the bench counted {rows[0]['wrong']} wrong elements")
    return float(rows[0]["time_us"])


def measure_overhead(
    size: str = "64M",
    nodes: int = 4,
    iters: int = 20,
    warmup: int = 5,
    repeats: int = 3,
    workdir: str | Path | None = None,
    extra: list[str] | None = None,
) -> dict:
    """Alternate plain and profiled bench runs; return the medians, ratio and sizes."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    info = require_nsys()
    work = Path(workdir or tempfile.mkdtemp(prefix="nsys_overhead_"))
    work.mkdir(parents=True, exist_ok=True)
    extra = list(extra or [])
    plain: list[float] = []
    profiled: list[float] = []
    report_bytes: list[int] = []
    wall: dict[str, list[float]] = {"plain": [], "profiled": []}
    for repeat in range(repeats):
        out = work / f"plain{repeat}.csv"
        start = time.perf_counter()
        subprocess.run(_bench(size, nodes, iters, warmup, out, extra), check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        wall["plain"].append(time.perf_counter() - start)
        plain.append(_median_us(out))

        name = f"overhead{repeat}"
        out = work / f"profiled{repeat}.csv"
        profile_paths(name, work)["dir"].mkdir(parents=True, exist_ok=True)
        argv = profile_command(
            name, _bench(size, nodes, iters, warmup, out, extra), root=work, nsys=info.path
        )
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall["profiled"].append(time.perf_counter() - start)
        profiled.append(_median_us(out))
        report_bytes.append(profile_paths(name, work)["report"].stat().st_size)
    ratio = statistics.median(profiled) / statistics.median(plain)
    return {
        "nsys": info.version,
        "size": size,
        "nodes": nodes,
        "iters": iters,
        "repeats": repeats,
        "plain_time_us": plain,
        "profiled_time_us": profiled,
        "ratio": ratio,
        "target_ratio": 1.10,
        "report_bytes": report_bytes,
        "wall_s": wall,
        "workdir": str(work),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ring.nsys.overhead", description=__doc__)
    parser.add_argument("--size", default="64M", help="bytes per node (bench suffixes)")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workdir", type=Path, help="keep the runs' files here (default: removed at the end)"
    )
    parser.add_argument("--json", type=Path, help="also write the result as JSON")
    args, extra = parser.parse_known_args(argv)
    problem = args.json and file_problem(args.json, "--json")  # before minutes of runs
    if problem:
        print(f"python -m ring.nsys.overhead: error: {problem}", file=sys.stderr)
        return 2
    # Without --workdir the runs' files, reports too, go with a temporary folder.
    kept = args.workdir
    folder = nullcontext(kept) if kept else tempfile.TemporaryDirectory(prefix="nsys_overhead_")
    try:
        with folder as work:
            result = measure_overhead(
                args.size, args.nodes, args.iters, args.warmup, args.repeats, work, extra
            )
        if kept is None:
            result["workdir"] = None
    except NsysNotFoundError as exc:
        print(f"python -m ring.nsys.overhead: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:  # the bench said why, unless under nsys
        print(
            f"python -m ring.nsys.overhead: {shlex.join(map(str, exc.cmd))} exited "
            f"{exc.returncode}: no ratio",
            file=sys.stderr,
        )
        return 1
    except RuntimeError as exc:  # a run's result file: not one row, or wrong elements
        print(f"python -m ring.nsys.overhead: {exc}", file=sys.stderr)
        return 1
    for plain, profiled, nbytes in zip(
        result["plain_time_us"], result["profiled_time_us"], result["report_bytes"], strict=True
    ):
        print(
            f"plain {plain:10.1f} us   under nsys {profiled:10.1f} us   "
            f"report {nbytes / 1e6:.2f} MB"
        )
    verdict = "within" if result["ratio"] <= result["target_ratio"] else "above"
    print(
        f"ratio (median of medians) {result['ratio']:.3f}, {verdict} the "
        f"{result['target_ratio']:.2f} target; nsys {result['nsys']}, {result['size']} per "
        f"node, N = {result['nodes']}, {result['iters']} iterations x {result['repeats']}"
    )
    if args.json:
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
