"""What one NVTX push+pop costs in Python, by the ways nvtx offers, against the private one.

    .venv/bin/python scripts/nvtx_cost.py [--number 1000000] [--repeat 5]

ring.nvtx must stay on nvtx's public API at the cost of its private entry points or
less (issue 17). This times each way over ``--number`` push+pop pairs in domain ``ring``,
``--repeat`` times, and prints the median per pair and its ratio to the private calls.
Without a profiler attached every NVTX C call returns at once, so what differs is Python's
work around it: the ratios hold under nsys too, the absolute times do not.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import timeit
from importlib.metadata import version

import nvtx

DOMAIN = "ring"
MESSAGE = "reduce_scatter step 2 node 1"


def _ways() -> dict[str, tuple]:
    """Name -> (push, pop), each a zero-argument callable built once, as a backend would."""
    from nvtx import _lib  # the private entry points, as the baseline only

    domain = nvtx.get_domain(DOMAIN)
    attributes = domain.get_event_attributes(MESSAGE, None)
    ways = {
        "private _lib.push_range/pop_range (partial)": (
            functools.partial(_lib.push_range, attributes, domain.handle),
            functools.partial(_lib.pop_range, domain.handle),
        ),
        "public annotate(...).__enter__/__exit__ (ring.nvtx)": (
            nvtx.annotate(MESSAGE, domain=DOMAIN).__enter__,
            nvtx.annotate(domain=DOMAIN).__exit__,
        ),
        "public nvtx.push_range/pop_range(domain=)": (
            functools.partial(nvtx.push_range, MESSAGE, domain=DOMAIN),
            functools.partial(nvtx.pop_range, domain=DOMAIN),
        ),
    }
    if hasattr(domain, "push_range"):  # nvtx >= 0.2.12
        ways["public Domain.push_range(attributes)/pop_range()"] = (
            functools.partial(domain.push_range, attributes),
            domain.pop_range,
        )
    return ways


def measure(number: int, repeat: int) -> dict[str, float]:
    """Median seconds per push+pop of each way (all timed in this one process, in turn)."""
    ways = _ways()
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeat):  # interleaved, so drift on a shared machine hits every way
        for name, (push, pop) in ways.items():
            loop = timeit.Timer("push(); pop()", globals={"push": push, "pop": pop})
            times[name].append(loop.timeit(number) / number)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=10**6, help="pairs per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per way (median)")
    args = parser.parse_args()
    if not nvtx.enabled():
        raise SystemExit("nvtx_cost.py: NVTX_DISABLE is set, so every way is a no-op")
    medians = measure(args.number, args.repeat)
    base = medians["private _lib.push_range/pop_range (partial)"]
    print(f"nvtx {version('nvtx')}: median of {args.repeat} timings of {args.number} pairs")
    for name, seconds in medians.items():
        print(f"{seconds * 1e9:8.1f} ns/pair  {seconds / base:5.2f}x private  {name}")


if __name__ == "__main__":
    main()
