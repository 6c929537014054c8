"""``--osu``: the harness under the OSU micro-benchmarks' flags and table (osu_allreduce).

OSU and nccl-tests give two letters different meanings: ``-i`` is nccl-tests' step in bytes
but OSU's iterations, ``-f`` nccl-tests' step factor but OSU's full statistics, ``-m``
nccl-tests' aggregated operations but OSU's message sizes.  The nccl-tests meanings stay the
default; with ``--osu`` the OSU ones apply, translated here into the sweep's own flags:

* ``-m [MIN:]MAX`` (``--message-size``): sizes in bytes, powers of two from MIN (default 4,
  one float, as osu_allreduce) to MAX (default 1M); K/M/G suffixes are accepted too.
* ``-i N`` (``--iterations``): timed calls per size (default 1000, OSU's for small messages;
  OSU drops to 100 above 8 KiB, this harness keeps one count for every size).
* ``-x N`` (``--warmup``): untimed calls per size (default 200, likewise).
* ``-f`` (``--full``): the table adds OSU's Min and Max latency and the iterations.

The table is OSU's: ``# Size  Avg Latency(us)`` (and ``Min Latency(us)  Max Latency(us)
Iterations`` with ``-f``), each latency a rank's mean over the timed calls, averaged (min,
max) over ranks, as osu_allreduce reports them.  osu_allreduce reduces out of place, so the
figures are those of the out-of-place calls (in place with ``--out-of-place 0``).  A backend
in one process times every node's call as one: there min = avg = max, the mean call.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

from .flags import BenchInputError, BenchParser, parse_size

__all__ = ["OSU_DEFAULTS", "OsuFlags", "osu_argv", "osu_header", "osu_line"]

# osu_allreduce's defaults (small messages): sizes 4 B .. 1 MiB, 1000 iterations, 200 warm-up.
OSU_DEFAULTS = {"min": "4", "max": "1M", "iterations": "1000", "warmup": "200"}
# nccl-tests' flags that --osu takes over from the sweep: given with --osu, they would be
# read with the other meaning.
_TAKEN = {"-b", "-e", "-n", "-w", "--min-bytes", "--max-bytes", "--minbytes", "--maxbytes"}
_TAKEN |= {"--iters", "--warmup_iters", "-i", "--step-bytes", "--stepbytes"}


@dataclass(frozen=True)
class OsuFlags:
    """What ``--osu`` was given (recorded in the JSON's ``config.osu``)."""

    message_size: str
    iterations: int
    warmup: int
    full: bool

    def to_json(self) -> dict:
        return asdict(self)


def _osu_parser() -> argparse.ArgumentParser:
    parser = BenchParser(prog="python -m ring.bench --osu", add_help=False, allow_abbrev=False)
    add = parser.add_argument
    add("--osu", action="store_true")
    add("-m", "--message-size", default=None)
    add("-i", "--iterations", default=None)
    add("-x", "--warmup", default=None)
    add("-f", "--full", action="store_true")
    return parser


def osu_argv(argv: list[str]) -> tuple[list[str], OsuFlags | None]:
    """``argv`` with OSU's flags turned into the sweep's (``-b -e -n -w``), and what they
    were; ``argv`` itself and None without ``--osu``."""
    if "--osu" not in argv:
        return argv, None
    args, rest = _osu_parser().parse_known_args(argv)
    for item in rest:
        if item.split("=", 1)[0] in _TAKEN:
            raise BenchInputError(
                f"{item.split('=', 1)[0]} is nccl-tests' flag; under --osu give OSU's: "
                "-m [MIN:]MAX sizes, -i iterations, -x warm-up iterations, -f full statistics"
            )
    low, high = _message_sizes(args.message_size)
    iterations = args.iterations or OSU_DEFAULTS["iterations"]
    warmup = args.warmup or OSU_DEFAULTS["warmup"]
    for flag, text in (("-i/--iterations", iterations), ("-x/--warmup", warmup)):
        if not text.isdigit():
            raise BenchInputError(f"{flag} {text!r} is not a whole number")
    translated = ["-b", low, "-e", high, "-f", "2", "-n", iterations, "-w", warmup, *rest]
    flags = OsuFlags(
        message_size=f"{low}:{high}",
        iterations=int(iterations),
        warmup=int(warmup),
        full=args.full,
    )
    return translated, flags


def _message_sizes(text: str | None) -> tuple[str, str]:
    """OSU's ``-m [MIN:]MAX`` (either side may be empty: its default), checked here: an
    error found in the sweep's ``-b``/``-e`` they become would name flags never given."""
    if text is None:
        return OSU_DEFAULTS["min"], OSU_DEFAULTS["max"]
    low, _, high = text.rpartition(":") if ":" in text else ("", "", text)
    low, high = low or OSU_DEFAULTS["min"], high or OSU_DEFAULTS["max"]
    try:
        smallest, largest = parse_size(low), parse_size(high)
    except BenchInputError as exc:
        raise BenchInputError(f"-m/--message-size {text!r}: {exc}") from None
    if smallest > largest:
        raise BenchInputError(
            f"-m/--message-size {text!r}: MIN ({low}) is larger than MAX ({high})"
        )
    return low, high


def osu_header(config, place: str, local: list[str]) -> list[str]:
    """OSU's title and column lines (osu_util.c: FIELD_WIDTH 18, sizes in 10); ``local``:
    the series whose nodes one process times at once."""
    flags = config.osu
    title = (
        f"# OSU MPI Allreduce Latency Test (ring.bench --osu: {place}, "
        f"{config.dtype.name} {config.op}, iterations {flags.iterations}, "
        f"warm-up {flags.warmup})"
    )
    columns = f"{'# Size':<10}{'Avg Latency(us)':>18}"
    if flags.full:
        columns += f"{'Min Latency(us)':>18}{'Max Latency(us)':>18}{'Iterations':>12}"
    lines = [title]
    if local:
        lines.append(
            f"# {', '.join(local)}: one process times every node's call at once, one rank "
            "in OSU's terms: Min = Avg = Max, the mean call"
        )
    return [*lines, f"{columns}  series"]


def osu_line(config, nbytes: int, stats: dict, series: str) -> str:
    """One size in OSU's layout: size, average latency (and min, max, iterations)."""
    line = f"{nbytes:<10}{stats['avg']:>18.2f}"
    if config.osu.full:
        line += f"{stats['min']:>18.2f}{stats['max']:>18.2f}{config.iters:>12}"
    return f"{line}  {series}"
