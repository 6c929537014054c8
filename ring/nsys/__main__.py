"""``python -m ring.nsys``: check for nsys, export stats, build tables and summaries."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bench.outputs import directory_problem, file_problem
from .pipeline import run_profile
from .summary import write_summary
from .tables import NsysCsvError, write_tables
from .tool import (
    GpuNotFoundError,
    NsysError,
    export_stats,
    require_gpus,
    require_nsys,
)

PROG = "python -m ring.nsys"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Nsight Systems profiles of the ring collectives as tables: check for "
        "nsys, run nsys stats into CSV files, turn them into tidy tables and a summary.md.",
        epilog="Without nsys: sudo sh scripts/install_nsys.sh (Debian 12).",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="say whether nsys (and GPUs) are usable")
    check.add_argument("--nsys", help="nsys executable (default: $NSYS or nsys on PATH)")
    check.add_argument("--gpus", type=int, default=0, help="also require this many GPUs")

    stats = commands.add_parser("stats", help="run nsys stats on a report, CSV per report")
    stats.add_argument("report", type=Path, help="the .nsys-rep file")
    stats.add_argument("--prefix", type=Path, required=True, help="files are PREFIX_<report>.csv")
    stats.add_argument("--nsys", help="nsys executable")
    stats.add_argument(
        "--no-waits", action="store_true", help="skip the per-range wait report (ring_waits)"
    )

    tables = commands.add_parser("tables", help="nsys stats CSV files -> tidy tables")
    tables.add_argument("--out", type=Path, required=True, help="directory for the tables")
    tables.add_argument("csv", nargs="+", type=Path, help="PREFIX_<report>.csv files")

    summary = commands.add_parser("summary", help="tables directory -> summary.md")
    summary.add_argument("tables", type=Path, help="directory written by 'tables'")
    summary.add_argument("--out", type=Path, required=True, help="Markdown file to write")
    summary.add_argument("--title", help="heading of the summary")

    profile = commands.add_parser(
        "profile", help="profile a command, then stats, tables and summary in one go"
    )
    profile.add_argument("--name", required=True, help="profile name (results/profiles/NAME)")
    profile.add_argument("--root", type=Path, default=Path("results/profiles"))
    profile.add_argument("--gpus", type=int, default=0, help="GPUs needed; traces CUDA if > 0")
    profile.add_argument("--nsys", help="nsys executable")
    profile.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command to profile")
    return parser


def _output_problem(args) -> str | None:
    """Where this command would write, checked before it reads or runs anything."""
    if args.command == "tables":
        return directory_problem(args.out, "--out")
    if args.command == "summary":
        return file_problem(args.out, "--out")
    if args.command == "stats":
        return directory_problem(args.prefix.parent, "--prefix")
    if args.command == "profile":
        return directory_problem(args.root / args.name, "--root")
    return None


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    problem = _output_problem(args)
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.command == "check":
            info = require_nsys(args.nsys, importer=True)
            print(f"nsys usable: {info.describe()}")
            if args.gpus:
                found = require_gpus(args.gpus)
                print(f"GPUs: {found} found, {args.gpus} needed")
            return 0
        if args.command == "stats":
            for path in export_stats(
                args.report, args.prefix, nsys=args.nsys, waits=not args.no_waits
            ):
                size = path.stat().st_size
                print(f"{path}" + ("" if size else "  (no data)"))
            return 0
        if args.command == "tables":
            written = write_tables(args.csv, args.out)
            for name, path in written.items():
                print(f"{name}: {path}")
            if not written:
                print("no report had data; no table written")
            return 0
        if args.command == "summary":
            print(write_summary(args.tables, args.out, title=args.title))
            return 0
        if args.command == "profile":
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if not cmd:
                print(f"{PROG} profile: error: give the command after --", file=sys.stderr)
                return 2
            paths = run_profile(args.name, cmd, gpus=args.gpus, root=args.root, nsys=args.nsys)
            print(f"summary: {paths['summary']}")
            return 0
    except (NsysError, GpuNotFoundError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except (NsysCsvError, FileNotFoundError, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: error: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    raise AssertionError(f"unhandled command {args.command}")  # argparse requires one


if __name__ == "__main__":
    sys.exit(main())
