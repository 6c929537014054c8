"""``python -m ring.report``: build the figures and the report from result files.

Every file named on the command line is required (a missing or malformed one stops the
build with a message naming it, before anything is written).  ``--results DIR`` adds what
the workflow wrote under ``DIR``; results that are absent are reported as not measured.
"""

from __future__ import annotations

import argparse
import sys

from ..bench.outputs import directory_problem
from .build import build_report, collect_inputs
from .inputs import ReportInputError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ring.report",
        description="Build the study's figures and report (index.html, report.md).",
    )
    parser.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="CSV",
        help="a ring.bench result CSV (its JSON beside it); repeat for several",
    )
    parser.add_argument(
        "--kernel-bw",
        action="append",
        default=[],
        metavar="CSV",
        help="the GPU reduction-kernel bandwidth CSV; repeatable",
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="DIR",
        help="a profile folder holding tables/*.csv from ring.nsys; repeatable",
    )
    parser.add_argument(
        "--alternated",
        action="append",
        default=[],
        metavar="CSV",
        help="a `python -m ring.bench alternate` result (separate launches); repeatable",
    )
    parser.add_argument(
        "--not-measured",
        metavar="JSON",
        help="the workflow's record of what this machine left out and why "
        "(results/report/not_measured.json)",
    )
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of results measured on another machine (results/reference/<machine>), "
        "drawn beside these and labelled with the folder's name; repeatable",
    )
    parser.add_argument(
        "--results",
        metavar="DIR",
        help="also take every result under DIR/{cpu,mpi,gpu}/*.csv and DIR/profiles/*/",
    )
    parser.add_argument("--figures", required=True, metavar="DIR", help="where figures go")
    parser.add_argument("--out", required=True, metavar="DIR", help="where the report goes")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for folder, flag in ((args.figures, "--figures"), (args.out, "--out")):
        problem = directory_problem(folder, flag)
        if problem:
            print(f"ring.report: {problem}", file=sys.stderr)
            return 2
    try:
        chosen = collect_inputs(
            args.sweep,
            args.kernel_bw,
            args.profile,
            args.results,
            args.not_measured,
            args.reference,
            args.alternated,
        )
        result = build_report(
            chosen["sweeps"],
            kernel_bandwidth=chosen["kernel_bandwidth"],
            profiles=chosen["profiles"],
            not_measured=next(iter(chosen["not_measured"]), None),
            references=chosen["references"],
            alternated=chosen["alternated"],
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


if __name__ == "__main__":
    sys.exit(main())
