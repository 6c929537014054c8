"""``python -m ring.model {fit,predict,table,paper,check-auto,check-picks,decisions,hosts}``:
the α–β–γ model from the command line."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from pathlib import Path

from ..bench.cli import BenchInputError, parse_size
from ..bench.flags import format_bytes
from ..bench.outputs import file_problem
from . import calibration
from .costs import ALGORITHMS, ModelInputError
from .data import load_groups, unfittable
from .fit import Fit, Host, fit_group
from .regimes import INLINE, ONE, THREADED
from .table import (
    TABLE_NODES,
    crossover_lines,
    decision_table,
    load_fits,
    save_fits,
    select,
    table_lines,
)

HELD_OUT_MIN_BYTES = 4096


def _interval(fit: Fit, name: str, unit: float) -> str:
    low, high = fit.interval[name]
    return f"[{low * unit:.4g}, {high * unit:.4g}] (95 %)"


def _regime(fit: Fit, whole: Fit) -> str:
    limit = format_bytes(whole.inline_bytes)
    if fit.regime == THREADED:
        return f"  threaded: calls above {limit} per node, on N worker threads"
    return f"  inline: calls of at most {limit} per node, on the calling thread"


def _describe(fit: Fit) -> list[str]:
    lines = [
        f"{' '.join(fit.key.values())} ({', '.join(fit.algorithms)}; N = "
        f"{', '.join(map(str, fit.nodes))}; {'shared bus' if fit.shared else 'own links'})"
    ]
    for regime in fit.regimes():
        if regime.regime != ONE:
            lines.append(_regime(regime, fit))
        lines += _parameters(regime)
        lines.append(_corrections(regime))
    lines.append(
        "  held-out (fit on alternate sizes), error at sizes >= "
        f"{format_bytes(HELD_OUT_MIN_BYTES)}:"
    )
    for h in fit.held_out:
        if h.nbytes >= HELD_OUT_MIN_BYTES:
            lines.append(
                f"    {h.algorithm} N={h.nodes} {format_bytes(h.nbytes):>8}: measured "
                f"{h.measured_s * 1e6:10.1f} us, predicted {h.predicted_s * 1e6:10.1f} us, "
                f"{h.error * 100:+6.1f} %"
            )
    return lines


def _corrections(fit: Fit) -> str:
    corrections = fit.corrections or {}
    count = sum(len(sizes) for by_n in corrections.values() for sizes in by_n.values())
    if not count:
        return (
            f"  corrections = none: no size was measured by {calibration.MIN_SWEEPS} sweeps "
            "(auto's table prices by the model alone; measure again to have them)"
        )
    worst = max(
        (abs(math.log(r)), a, n, size, r)
        for a, by_n in corrections.items()
        for n, sizes in by_n.items()
        for size, r in sizes
    )
    _, a, n, size, ratio = worst
    return (
        f"  corrections = measured over predicted at {count} (algorithm, N, size) points of "
        f">= {calibration.MIN_SWEEPS} sweeps, for auto's table; farthest {ratio:.2f}x "
        f"({a} N={n} {format_bytes(size)})"
    )


def _span(params) -> str:
    """The knee, or the working sets its ramp spans, in MiB."""
    start = params.knee / 2**20
    if params.ramp <= 1:
        return f"{start:.3g} MiB"
    return f"{start:.3g} to {start * params.ramp:.3g} MiB (beta rising over them)"


def _parameters(fit: Fit) -> list[str]:
    a, b, g = fit.params.alpha, fit.params.beta, fit.params.gamma
    knee = fit.params.knee
    return [
        f"  alpha = {a * 1e6:.3g} us {_interval(fit, 'alpha', 1e6)}",
        f"  beta  = {b * 1e12:.4g} ps/B {_interval(fit, 'beta', 1e12)}",
        f"  gamma = {g * 1e12:.4g} ps/B, {fit.gamma_source}",
        "  knee  = none (one beta at every size)"
        if math.isinf(knee)
        else f"  knee  = working set {_span(fit.params)}; beta beyond it = "
        f"{fit.params.beta_above * 1e12:.4g} ps/B {_interval(fit, 'beta_above', 1e12)}",
        f"  factors (steps, bytes) per algorithm: {fit.factor_source}",
        *(
            f"    {a}: steps x{f.steps:.3g}, bytes x{f.bytes:.3g}"
            for a, f in sorted(fit.factors.items())
        ),
        f"  sigma = {fit.params.sigma:.3g} per node per core past 1"
        + (f" {_interval(fit, 'sigma', 1)}" if "sigma" in fit.interval else "")
        + f", {fit.sigma_source}",
        *(
            [
                f"  per node = {fit.params.per_node * 1e6:.3g} us per call "
                f"{_interval(fit, 'per_node', 1e6)} (inline: alpha is per move of the plan)"
            ]
            if fit.regime == INLINE
            else []
        ),
    ]


def _fit(args: argparse.Namespace) -> None:
    out = Path(args.out) if args.out else Path(args.csv[0]).with_name("model_fit.json")
    problem = file_problem(out, "--out")  # before the fit's seconds of bootstrapping
    if problem:
        raise ModelInputError(problem)
    groups, notes = load_groups(args.csv, variants=args.variants)
    for group in groups:
        problem = unfittable(group)
        if problem:
            raise ModelInputError(problem)
    fits = [fit_group(group) for group in groups]
    try:
        save_fits(out, fits, notes)
    except OSError as exc:
        raise ModelInputError(f"{out}: cannot write the fit ({exc})") from None
    for fit in fits:
        print("\n".join(_describe(fit)))
    for note in notes:
        print(note)
    print(f"wrote {out}")


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except BenchInputError as exc:
        raise ModelInputError(str(exc)) from None


def _host(args: argparse.Namespace) -> Host:
    """The machine and inline threshold asked for (None: the fit's, or auto's)."""
    limit = None if args.inline_bytes is None else _size(args.inline_bytes)
    return Host(args.cores, None, limit)


def _predict(args: argparse.Namespace) -> None:
    fits = select(load_fits(args.fit), backend=args.backend, machine=args.machine)
    nbytes = _size(args.bytes)
    for fit in fits:
        seconds = fit.predict(args.algorithm, args.nodes, nbytes, _host(args))
        corrected = seconds * fit.correction(args.algorithm, args.nodes, nbytes, _host(args))
        measured = (
            "" if args.algorithm in fit.algorithms else " (not measured: the theory, factors 1)"
        )
        if corrected != seconds:
            measured += f"; {corrected * 1e6:.1f} us as auto prices it (measured correction)"
        print(
            f"{' '.join(fit.key.values())}: {args.algorithm} N={args.nodes} "
            f"{format_bytes(nbytes)}: {seconds * 1e6:.1f} us{measured}"
        )


def _auto_fits(backend: str | None) -> list[Fit]:
    """The fit ``algorithm="auto"`` uses on each backend (or the one asked for)."""
    from .auto import FIT_ENV, fit_for

    fits = []
    for name in [backend] if backend else ["cpu", "mpi", "gpu"]:
        fit, path = fit_for(name)
        print(f"auto on {name}: {path} ({FIT_ENV} to use your own fit)")
        fits.append(fit)
    return fits


def _table(args: argparse.Namespace) -> None:
    host = _host(args)
    if args.fit:
        fits = select(load_fits(args.fit), backend=args.backend, machine=args.machine)
    else:
        from .auto import local_host

        fits = _auto_fits(args.backend)
        host = local_host()  # what auto predicts with
        given = _host(args)._asdict().items()
        host = host._replace(**{k: v for k, v in given if v is not None})
    for fit in fits:
        names = list(ALGORITHMS) if args.all else list(fit.algorithms)
        rows = decision_table(fit, names, host=host)
        print("\n".join(table_lines(fit, rows)))
        print("\n".join(crossover_lines(fit, names, TABLE_NODES, host)))
        unmeasured = [a for a in names if a not in fit.factors]
        if fit.factors and unmeasured:
            print(f"  (not measured, priced by the theory, factors 1: {', '.join(unmeasured)})")
        if not args.all and len(fit.algorithms) == 1:
            print(f"  (only {fit.algorithms[0]} measured; --all ranks every algorithm's model)")


def _paper(args: argparse.Namespace) -> None:
    from .paper import default_links, paper_lines

    print("\n".join(paper_lines(args.links or default_links(), _size(args.bytes))))


def _check_auto(args: argparse.Namespace) -> None:
    from .auto_check import auto_points, check_lines

    print("\n".join(check_lines(auto_points(args.csv))))


def _check_picks(args: argparse.Namespace) -> None:
    from .auto_check import pick_lines, pick_points

    print("\n".join(pick_lines(pick_points(load_fits(args.fit), args.csv))))


def _decisions(args: argparse.Namespace) -> None:
    from .auto import DEFAULTS
    from .decisions import write_decisions, write_defaults

    if args.defaults:
        written = write_defaults(DEFAULTS)
    elif args.fit and args.out:
        problem = file_problem(args.out, "--out")
        if problem:
            raise ModelInputError(problem)
        written = [write_decisions(args.fit, args.out)]
    else:
        raise ModelInputError("decisions: give FIT and --out FILE, or --defaults")
    for path in written:
        print(f"wrote {path} (RING_AUTO_TABLE={path} makes algorithm='auto' read it)")


def _hosts(args: argparse.Namespace) -> None:
    from .hosts import write_hosts

    problem = file_problem(args.out, "--out")
    if problem:
        raise ModelInputError(problem)
    levels, rows = write_hosts(args.out, args.csv)
    for level in levels:
        link = level["link_GBps"]
        print(
            f"{level['rate']}: link alpha {level['alpha_net_s'] * 1e6:.4g} us, beta "
            f"{level['beta_net_s_per_B'] * 1e12:.4g} ps/B ("
            + (f"{link:.3g} GB/s" if link else "no byte cost")
            + f" against the rate's {level['rate_GBps']:.3g} GB/s); shared memory alpha "
            f"{level['alpha_shm_s'] * 1e6:.4g} us, beta {level['beta_shm_s_per_B'] * 1e12:.4g} ps/B"
        )
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        spread = f"{min(ratios):.2f} to {max(ratios):.2f}"
        print(f"predicted / measured over {len(ratios)} rows: {spread}")
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.csv')}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ring.model", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    fit = commands.add_parser("fit", help="fit alpha, beta, gamma from ring.bench CSVs")
    fit.add_argument("csv", nargs="+")
    fit.add_argument("--out", help="fit JSON (default: model_fit.json beside the first CSV)")
    fit.add_argument(
        "--variants",
        action="store_true",
        help="also fit rows run another way than auto prices (executor=slices, "
        "buffers=shared), each way as a group of its own",
    )
    for name in ("predict", "table"):
        sub = commands.add_parser(name)
        sub.add_argument(
            "--fit",
            required=name == "predict",
            help="a fit JSON from `fit` (table: default, the fits algorithm='auto' uses)",
        )
        sub.add_argument("--backend")
        sub.add_argument("--machine")
        sub.add_argument(
            "--cores",
            type=int,
            help="cores the N nodes run on, for the oversubscription term (default: the "
            "fitted machine's; table without --fit: this machine's, as auto)",
        )
        sub.add_argument(
            "--inline-bytes",
            help="the cpu backend's inline_bytes, where a fit has its inline and threaded "
            "regimes (default: the one its rows ran with; table without --fit: "
            "ring.cpu.INLINE_BYTES, as auto)",
        )
    predict = commands.choices["predict"]
    predict.add_argument("--algorithm", required=True)
    predict.add_argument("--nodes", type=int, required=True)
    predict.add_argument("--bytes", required=True, help="e.g. 1MiB, 64M, 4096")
    commands.choices["table"].add_argument(
        "--all", action="store_true", help="rank every algorithm, measured or not"
    )
    paper = commands.add_parser("paper", help="busbw past one machine from config/links.yaml")
    paper.add_argument(
        "--links",
        help="default: config/links.yaml of the working directory, else the package's own",
    )
    paper.add_argument("--bytes", default="1G", help="message size (default 1G)")
    check = commands.add_parser(
        "check-auto", help="auto against the fastest fixed algorithm of the same run"
    )
    check.add_argument("csv", nargs="+", help="ring.bench CSVs with --algorithm auto,...")
    picks = commands.add_parser(
        "check-picks",
        help="the measured time of the algorithm a fit picks against the fastest fixed one",
    )
    picks.add_argument("--fit", required=True, help="a fit JSON from `fit`")
    picks.add_argument("csv", nargs="+", help="ring.bench CSVs measuring several algorithms")
    decide = commands.add_parser(
        "decisions", help="the decision table algorithm='auto' reads, from a fit"
    )
    decide.add_argument("fit", nargs="?", help="a fit JSON from `fit`")
    decide.add_argument("--out", help="the table's path (then RING_AUTO_TABLE=PATH)")
    decide.add_argument(
        "--defaults",
        action="store_true",
        help="write ring/decisions/<machine>.json from every committed default fit",
    )
    hosts = commands.add_parser(
        "hosts", help="the inter-host link and shared memory fitted across emulated hosts"
    )
    hosts.add_argument("csv", nargs="+", help="ring.bench CSVs of `snakemake hosts` runs")
    hosts.add_argument("--out", required=True, help="the model's JSON (its rows: .csv beside)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    try:
        commands = {"fit": _fit, "predict": _predict, "table": _table, "paper": _paper}
        commands["check-auto"] = _check_auto
        commands["check-picks"] = _check_picks
        commands["decisions"] = _decisions
        commands["hosts"] = _hosts
        commands[args.command](args)
    except ModelInputError as exc:
        print(f"ring.model: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
