"""The report's command line (``python -m ring.report``, ``ring-report``): build the figures
and the report from result files.

Every file named on the command line is required (a missing or malformed one stops the
build with a message naming it, before anything is written).  ``--results DIR`` adds what
the workflow wrote under ``DIR``; results that are absent are reported as not measured.
"""

from __future__ import annotations

import argparse
import sys

from ..bench.outputs import directory_problem
from .build import INPUT_KINDS, build_report, collect_inputs
from .load import ReportInputError


def _repeatable(add, *flags: str, dest: str, metavar: str, help: str) -> None:
    """A flag that may be given several times, each time one file or folder."""
    add(*flags, dest=dest, action="append", default=[], metavar=metavar, help=help)


def _inputs(add) -> None:
    """The result files of this build, each kind a flag that may be repeated."""
    _repeatable(
        add,
        "--sweep",
        "--run",
        dest="runs",
        metavar="CSV",
        help="a ring.bench result CSV (its JSON beside it): a sweep, a screen, a run at the "
        "original's size; repeat for several",
    )
    _repeatable(
        add,
        "--confirm",
        dest="confirmations",
        metavar="CSV",
        help="a launch set confirming a screen's picks (python -m ring.bench launches "
        "--finalists): the findings come from these; repeatable",
    )
    _repeatable(
        add,
        "--fit",
        dest="fits",
        metavar="JSON",
        help="the α–β–γ model fitted to this build's screens (python -m ring.model fit "
        "--variants); repeatable",
    )
    _repeatable(
        add,
        "--kernel-bw",
        dest="kernel_bandwidth",
        metavar="CSV",
        help="the GPU reduction-kernel bandwidth CSV; repeatable",
    )
    _repeatable(
        add,
        "--profile",
        dest="profiles",
        metavar="DIR",
        help="a profile folder holding tables/*.csv from ring.nsys; repeatable",
    )
    _repeatable(
        add,
        "--alternated",
        dest="alternated",
        metavar="CSV",
        help="a `python -m ring.bench alternate` result (separate launches); repeatable",
    )
    _repeatable(
        add,
        "--hosts",
        dest="hosts",
        metavar="JSON",
        help="the model across emulated hosts beside its runs (python -m ring.model hosts): "
        "an appendix section; repeatable",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ring.report",
        description="Build the study's figures and report (index.html, report.md).",
    )
    _inputs(parser.add_argument)
    add = parser.add_argument
    add(
        "--not-measured",
        metavar="JSON",
        help="the workflow's record of what this machine left out and why "
        "(results/report/not_measured.json)",
    )
    _repeatable(
        add,
        "--reference",
        dest="references",
        metavar="DIR",
        help="a folder of results measured on another machine (results/reference/<machine>), "
        "shown in the appendix's Other machines section and nowhere else; repeatable",
    )
    add(
        "--results",
        metavar="DIR",
        help="also take every result under DIR/{cpu,mpi,gpu}/, DIR/compare/, DIR/profiles/ "
        "and DIR/hosts/model_hosts.json",
    )
    add("--figures", required=True, metavar="DIR", help="where figures go")
    add("--out", required=True, metavar="DIR", help="where the report goes")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for folder, flag in ((args.figures, "--figures"), (args.out, "--out")):
        problem = directory_problem(folder, flag)
        if problem:
            print(f"ring.report: {problem}", file=sys.stderr)
            return 2
    try:
        named = {k: getattr(args, k) for k in INPUT_KINDS if k != "not_measured"}
        chosen = collect_inputs(
            args.results,
            **named,
            not_measured=[args.not_measured] if args.not_measured else [],
            references=args.references,
        )
        record = chosen.pop("not_measured")
        result = build_report(
            chosen.pop("runs"),
            **chosen,
            not_measured=record[0] if record else None,
            figures_dir=args.figures,
            out_dir=args.out,
        )
    except ReportInputError as exc:
        print(f"ring.report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the disk filled up while the report was written
        print(
            f"ring.report: cannot write {exc.filename or args.out}: {exc.strerror}", file=sys.stderr
        )
        return 2
    print(f"wrote {result.html} and {result.markdown} in {result.seconds:.1f} s")
    print(f"figures drawn: {', '.join(result.drawn) or 'none'}")
    if result.not_drawn:
        print(f"not drawn (data absent): {', '.join(result.not_drawn)}")
    return 0
