"""Which series a run measures, chosen from an earlier run: the screen-and-confirm method.

A study that picks "our fastest" among many series and then judges it on the same calls
picks the series that was luckiest on those calls, and overstates it.  So the study picks
in one run (a **screen** of every series) and judges in others (**confirmation** launches of
the picks and the peers alone).  ``python -m ring.bench finalists SCREEN.csv --out F.json``
writes the picks; ``python -m ring.bench --select F.json ...`` measures only the series it
names (the run's flags still say what each series is; the file only keeps some of them).

A series is named by the columns that tell series apart in a result file
(:data:`SERIES_KEYS`), as the screen wrote them.  A peer (numpy-direct, seed-cpp,
MPI_Allreduce, NCCL: a backend that runs one algorithm of its own, its ``algorithm`` column
its own name) is always kept, so every confirmation measures ours against the same peers.

At each size the screen's fastest series of ours is that size's **pick**; with it, every
series of ours within ``within`` of it at that size is a **contender** (a near tie the
confirmation may show to be the faster one, or the same).  The finalists are the picks,
then the contenders by how many sizes they contend at, at most ``most`` series of ours in
all (every pick is kept even past ``most``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .flags import BenchInputError, BenchParser, int_flag
from .results import check_pair, file_sha256, read_csv, schema_problem, write_json_atomic
from .schema import POINT_KEYS, SCHEMA, SERIES_KEYS

__all__ = [
    "KIND",
    "ORDERS",
    "SERIES_KEYS",
    "add_selection_arguments",
    "choose_finalists",
    "finalists_main",
    "is_peer",
    "load_finalists",
    "load_selection",
    "parse_order",
    "selected",
    "series_key",
]

KIND = "finalists"
# --order: the order a run visits its series in, within each size and round; launches of
# one comparison alternate it, so a series' place in the round favours none of them.
ORDERS = ("forward", "reverse")


def is_peer(row: Mapping) -> bool:
    """A peer's rows carry its backend's name as their algorithm (ring.bench.algorithms)."""
    return row.get("algorithm") == row.get("backend")


def series_key(row: Mapping) -> dict[str, str]:
    """The series a result row belongs to, as text (empty where a column has no value)."""
    return {key: str(row.get(key) or "") for key in SERIES_KEYS}


def _value_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def selected(series, selection: Sequence[Mapping[str, str]]) -> bool:
    """Whether a series of this run (:class:`ring.bench.series.Series`) is one of
    ``selection``: same backend, sync and algorithm, and the same value of each of its own
    variant flags (``--executor slices``: executor = slices)."""
    if not series.backend.algorithms:
        return True  # a peer: every confirmation measures the same peers
    algorithm = series.algorithm or series.backend.name
    for chosen in selection:
        if (chosen["backend"], chosen["sync"], chosen["algorithm"]) != (
            series.backend.name,
            series.sync,
            algorithm,
        ):
            continue
        if all(_value_text(v) == chosen.get(k, "") for k, v in series.variant.items()):
            return True
    return False


def load_selection(path: str | Path) -> tuple[dict[str, str], ...]:
    """The series a finalists file names; a one-line :class:`BenchInputError` when it is
    missing, unreadable or not a finalists file."""
    series = load_finalists(path)["series"]
    return tuple({k: s.get(k, "") for k in SERIES_KEYS} for s in series)


def load_finalists(path: str | Path) -> dict:
    """A finalists file's document, checked (see :func:`load_selection`)."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchInputError(f"--select {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise BenchInputError(f"--select {path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise BenchInputError(
            f"--select {path}: not a finalists file (write one with "
            "python -m ring.bench finalists SCREEN.csv --out FILE.json)"
        )
    old = schema_problem(path, document=document)
    if old:
        raise BenchInputError(f"--select {old}")
    series = document.get("series")
    if not isinstance(series, list) or not series or not all(_named(s) for s in series):
        raise BenchInputError(f"--select {path}: its series list is empty or malformed")
    picks = document.get("picks")
    if not isinstance(picks, list) or not all(_picked(p) for p in picks):
        raise BenchInputError(f"--select {path}: its picks are malformed")
    return document


def _picked(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and all(isinstance(entry.get(k), str) for k in POINT_KEYS)
        and _named(entry.get("pick"))
        and isinstance(entry.get("contenders"), list)
        and all(_named(c) for c in entry["contenders"])
    )


def _named(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and all(isinstance(entry.get(k, ""), str) for k in SERIES_KEYS)
        and all(entry.get(k) for k in ("backend", "sync", "algorithm"))
    )


def _frozen(key: Mapping[str, str]) -> tuple:
    return tuple(key[k] for k in SERIES_KEYS)


def choose_finalists(rows: Sequence[Mapping], within: float, most: int) -> dict:
    """The picks and finalists of a screen's rows (see the module docstring): a document
    with ``series`` (every finalist of ours, then every peer) and ``picks`` (per point,
    the series of ours that was fastest there and its contenders)."""
    points: dict[tuple, list[Mapping]] = {}
    peers: dict[tuple, dict[str, str]] = {}
    for row in rows:
        if is_peer(row):
            peers.setdefault(_frozen(series_key(row)), series_key(row))
        elif row.get("time_us") not in (None, ""):
            points.setdefault(tuple(str(row[k]) for k in POINT_KEYS), []).append(row)
    if not points:
        raise BenchInputError("the screen has no row of our ring backends to pick from")
    picks: list[dict] = []
    contended: dict[tuple, int] = {}
    named: dict[tuple, dict[str, str]] = {}
    for point, ours in sorted(points.items(), key=lambda item: (item[0][:3], int(item[0][3]))):
        ours = sorted(ours, key=lambda r: float(r["time_us"]))
        best = float(ours[0]["time_us"])
        near = [r for r in ours if float(r["time_us"]) <= best * (1 + within)]
        for row in near:
            key = series_key(row)
            named[_frozen(key)] = key
            contended[_frozen(key)] = contended.get(_frozen(key), 0) + 1
        picks.append(
            {
                **dict(zip(POINT_KEYS, point, strict=True)),
                "pick": series_key(ours[0]),
                "contenders": [series_key(r) for r in near[1:]],
            }
        )
    chosen = list(dict.fromkeys(_frozen(p["pick"]) for p in picks))
    others = sorted((k for k in contended if k not in chosen), key=lambda k: -contended[k])
    chosen += others[: max(0, most - len(chosen))]
    return {
        "series": [named[k] for k in chosen] + list(peers.values()),
        "picks": picks,
        "within": within,
    }


def _parser() -> BenchParser:
    parser = BenchParser(prog="python -m ring.bench finalists", description=__doc__)
    add = parser.add_argument
    add("screen", help="the screen's result CSV (every series of ours beside the peers)")
    add("--out", required=True, help="the finalists file to write (JSON)")
    add(
        "--within",
        default="0.05",
        help="a series of ours within this fraction of the size's fastest contends with it "
        "(default 0.05)",
    )
    add("--most", default="4", help="series of ours to confirm, at most (default 4)")
    return parser


def finalists_main(argv: list[str], command: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        within = float(args.within)
    except ValueError:
        raise BenchInputError(f"--within {args.within!r} is not a number") from None
    if not 0 <= within < 1:
        raise BenchInputError(f"--within must be in [0, 1), got {args.within}")
    most = int_flag(args.most, "--most", 1)
    screen, out = Path(args.screen), Path(args.out)
    if out.suffix != ".json":
        raise BenchInputError(f"--out {args.out!r} must name a .json file")
    try:
        meta = json.loads(screen.with_suffix(".json").read_text(encoding="utf-8"))
        columns, rows = read_csv(screen)
    except OSError as exc:
        raise BenchInputError(f"{screen}: cannot read it or its JSON ({exc.strerror})") from None
    except ValueError as exc:
        raise BenchInputError(f"{screen.with_suffix('.json')}: not JSON ({exc})") from None
    problem = schema_problem(screen, columns, meta) or check_pair(screen, meta)
    if problem:
        raise BenchInputError(problem)
    document = {
        "schema": SCHEMA,
        "kind": KIND,
        "command": list(command),
        "screen": str(screen),
        "screen_sha256": file_sha256(screen),
        **choose_finalists(rows, within, most),
    }
    write_json_atomic(out, document)
    ours = [s for s in document["series"] if not is_peer(s)]
    for s in document["series"]:
        print(" ".join(f"{k}={v}" for k, v in s.items() if v))
    print(f"# {len(ours)} series of ours and {len(document['series']) - len(ours)} peers: {out}")
    return 0


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """``--select`` and ``--order``, the flags of a confirmation launch."""
    parser.add_argument(
        "--select",
        default=None,
        metavar="FILE.json",
        help="measure only the series this finalists file names (python -m ring.bench "
        "finalists), of those the other flags give; peers are always measured",
    )
    parser.add_argument(
        "--order",
        default=ORDERS[0],
        help="the order the series are visited in at each size and round: forward (the "
        "flags' order, the default) or reverse",
    )


def parse_order(text: str) -> str:
    if text not in ORDERS:
        raise BenchInputError(f"--order must be one of {', '.join(ORDERS)}, got {text!r}")
    return text
