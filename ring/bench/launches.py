"""``python -m ring.bench launches``: one run, launched several times, in alternating order.

A ratio measured in one launch holds for that launch: its process, its placement, the
machine's state during its seconds.  On a shared machine those change from one launch to
the next by more than many effects worth reporting, and no spread within a launch shows it.
So a comparison is launched ``--launches L`` times, one after the other, each launch a
whole new process (or ``mpirun`` job) of the same harness flags, and the series' order
alternates between launches (``--order forward``, ``reverse``, ...), so a place in the
round favours no series.  A ratio's interval then comes from the spread *between*
launches: the reader's question is what the next launch would give.

    python -m ring.bench launches --launches 5 --out results/cpu/confirm_n2_float32.csv \\
        -- --backend cpu,numpy-direct --nodes 2 -b 1K -e 64M -f 4 -n 20 --rounds 5
    python -m ring.bench launches --launches 5 --launcher "mpirun --oversubscribe -n 2" \\
        --out results/mpi/confirm_n2_float32.csv -- --backend mpi,mpi-allreduce ...

Each launch writes its own files under ``FILE.launches/launchK.{csv,json,samples.csv,log}``.
When every launch has succeeded, ``FILE.csv`` holds all their rows and ``FILE.samples.csv``
all their calls, each with its ``launch`` (1 … L), and ``FILE.json`` every launch's own
document (environment, ceilings at its start and end, command) under ``launches``.  A
launch that fails ends the set at once with its exit status and one line, and no
``FILE.csv`` is written: a set is complete or absent.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from .environment import utc_now
from .flags import BenchInputError, BenchParser, int_flag
from .results import (
    check_pair,
    columns_of,
    csv_text,
    output_problem,
    read_csv,
    samples_path,
    schema_problem,
    write_result_pair,
)
from .schema import COLUMNS, LAUNCH, SAMPLE_COLUMNS, SCHEMA
from .selection import ORDERS, load_finalists

__all__ = ["KIND", "launcher_words", "launches_main", "order_of"]

KIND = "launches"
# Flags the launch set sets for each launch itself.
_OWN_FLAGS = ("--out", "-F", "--results_file", "--order", "--select")


def _parser() -> BenchParser:
    parser = BenchParser(prog="python -m ring.bench launches", description=__doc__)
    add = parser.add_argument
    add("--launches", default="5", help="launches of the run, one after the other (default 5)")
    add(
        "--launcher",
        default=None,
        help="the MPI launcher and its flags, the rank count included (e.g. "
        "'mpirun --oversubscribe -n 2'); without one each launch is one process",
    )
    add(
        "--finalists",
        default=None,
        metavar="FILE.json",
        help="a screen's picks (python -m ring.bench finalists): every launch measures only "
        "them and the peers (--select), and the set's JSON keeps the file's document",
    )
    add("--out", required=True, help="FILE.csv (FILE.json and FILE.samples.csv beside it)")
    add("flags", nargs=argparse.REMAINDER, help="-- then the harness's flags for every launch")
    return parser


def launcher_words(text: str) -> list[str]:
    """The launcher's words, once its program is found: checked before the first launch, so
    a typo ends the set at once rather than after a launch has run."""
    try:
        words = shlex.split(text)
    except ValueError as exc:  # an unbalanced quote
        raise BenchInputError(f"--launcher {text!r}: {exc}") from None
    if not words:
        raise BenchInputError("--launcher is empty: name the MPI launcher (e.g. mpirun)")
    if shutil.which(words[0]) is None:
        raise BenchInputError(f"--launcher {text!r}: no program {words[0]!r} on PATH")
    return words


def order_of(launch: int) -> str:
    """Launch 1 visits the series in the flags' order, launch 2 in reverse, and so on."""
    return ORDERS[(launch - 1) % len(ORDERS)]


def _harness_flags(flags: list[str]) -> list[str]:
    flags = flags[1:] if flags[:1] == ["--"] else list(flags)
    if not flags:
        raise BenchInputError("give the harness's flags after --, e.g. -- --backend cpu -b 1K")
    for flag in flags:
        name = flag.split("=", 1)[0]
        if name in _OWN_FLAGS:
            raise BenchInputError(f"{name} is set per launch by `launches`: leave it out")
    return flags


def _command(launcher: list[str] | None, flags: list[str], launch: int, csv: Path) -> list[str]:
    # Under a launcher, mpi4py's runner turns an exception on one rank into the job's end.
    harness = [sys.executable, *(["-m", "mpi4py"] if launcher else []), "-m", "ring.bench"]
    return [*(launcher or []), *harness, *flags, "--order", order_of(launch), "--out", str(csv)]


def _run_launch(argv: list[str], log: Path) -> int:
    with open(log, "w", encoding="utf-8") as handle:
        return subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT).returncode


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _read_launch(csv: Path) -> tuple[list[str], list[dict], list[dict] | None, dict]:
    json_path = csv.with_suffix(".json")
    document = json.loads(json_path.read_text(encoding="utf-8"))
    columns, rows = read_csv(csv)
    problem = schema_problem(csv, columns, document) or check_pair(csv, document)
    if problem:
        raise BenchInputError(problem)
    samples = samples_path(csv)
    calls = read_csv(samples)[1] if samples.is_file() else None
    return columns, rows, calls, document


def _combine(csvs: list[Path]) -> tuple[list[dict], list[str], str | None, list[dict]]:
    """Every launch's rows and calls with their ``launch``; the samples' text (None when a
    launch kept none) and every launch's document."""
    rows, calls, documents = [], [], []
    columns: list[str] = [LAUNCH, *COLUMNS]
    every_call = True
    for launch, csv in enumerate(csvs, start=1):
        names, launch_rows, launch_calls, document = _read_launch(csv)
        columns = columns_of([dict.fromkeys(names)], columns)
        rows += [{LAUNCH: launch, **row} for row in launch_rows]
        if launch_calls is None:
            every_call = False
        else:
            calls += [{LAUNCH: launch, **call} for call in launch_calls]
        documents.append(document)
    samples = csv_text(calls, columns_of(calls, [LAUNCH, *SAMPLE_COLUMNS])) if every_call else None
    return rows, columns, samples, documents


def launches_main(argv: list[str], command: list[str]) -> int:
    args = _parser().parse_args(argv)
    count = int_flag(args.launches, "--launches", 2)
    launcher = None if args.launcher is None else launcher_words(args.launcher)
    flags = _harness_flags(args.flags)
    finalists = None
    if args.finalists is not None:
        finalists = load_finalists(args.finalists)
        flags += ["--select", args.finalists]
    out = Path(args.out)
    if out.suffix != ".csv" or not out.stem:
        raise BenchInputError(f"--out {args.out!r} must name a .csv file (the JSON goes beside it)")
    problem = output_problem(out)
    if problem:
        raise BenchInputError(problem)
    folder = out.with_suffix(".launches")
    folder.mkdir(parents=True, exist_ok=True)
    start, csvs, launched = utc_now(), [], []
    for launch in range(1, count + 1):
        csv = folder / f"launch{launch}.csv"
        argv_ = _command(launcher, flags, launch, csv)
        print(f"# launch {launch}/{count} ({order_of(launch)}): {shlex.join(argv_)}", flush=True)
        status = _run_launch(argv_, csv.with_suffix(".log"))
        if status != 0:
            print(_tail(csv.with_suffix(".log")), file=sys.stderr)
            print(
                f"ring.bench launches: launch {launch} of {count} failed (exit {status}); "
                f"its log: {csv.with_suffix('.log')}; no launch set written",
                file=sys.stderr,
            )
            return status if status in (1, 2, 3, 130) else 1
        csvs.append(csv)
        launched.append({"launch": launch, "order": order_of(launch), "command": argv_})
    rows, columns, samples, documents = _combine(csvs)
    for entry, document in zip(launched, documents, strict=True):
        entry["json"] = document
    first = documents[0]
    summary = {
        "schema": SCHEMA,
        "kind": KIND,
        "command": list(command),
        "start_time": start,
        "end_time": utc_now(),
        **{k: first.get(k) for k in ("git_commit", "git_dirty", "environment", "config")},
        "wrong_total": sum(int(d.get("wrong_total") or 0) for d in documents),
        "launches": launched,
        **({} if finalists is None else {"finalists": finalists}),
    }
    sides = [] if samples is None else [(samples_path(out), samples)]
    write_result_pair(out, rows, columns, summary, sides)
    print(f"# Wrote {out} ({count} launches), {out.with_suffix('.json')}")
    return 0
