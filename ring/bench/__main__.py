"""``python -m ring.bench`` / ``ring-bench``: exit 0 ok, 1 wrong results, 2 bad input, 3 a
sweep that failed part-way (the sizes measured before it written, marked ``partial`` in
the JSON), 130 interrupted (Ctrl-C).

Subcommands: ``merge``, ``alternate``, ``launches``, ``finalists``, ``kernel-bw``,
``cpu-perf``; without one, a sweep.
"""

from __future__ import annotations

import sys

from .._optional import MissingDependencyError
from .backends import available_backends
from .cli import BenchInputError, parse_args
from .merge import merge_main
from .results import InterruptedAfterWriting
from .runner import env_is_root, run

__all__ = ["main"]


def _known_syncs(backends) -> list[str]:
    return list(dict.fromkeys(mode for cls in backends.values() for mode in cls.sync_modes))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    command = list(sys.orig_argv) if argv is None else ["ring-bench", *args]
    try:
        if args[:1] == ["merge"]:
            return merge_main(args[1:], command)
        if args[:1] == ["alternate"]:
            from .alternate import alternate_main

            return alternate_main(args[1:], command)
        if args[:1] == ["launches"]:
            from .launches import launches_main

            return launches_main(args[1:], command)
        if args[:1] == ["finalists"]:
            from .selection import finalists_main

            return finalists_main(args[1:], command)
        if args[:1] == ["cpu-perf"]:
            from .cpu_perf import cpu_perf_main

            return cpu_perf_main(args[1:])
        if args[:1] == ["kernel-bw"]:
            from .kernel_bw import kernel_bw_main

            return kernel_bw_main(args[1:], command)
        backends = available_backends()
        config = parse_args(args, backends, _known_syncs(backends))
        return run(config, command)
    except (BenchInputError, MissingDependencyError) as exc:
        if env_is_root():
            print(f"ring.bench: error: {exc}", file=sys.stderr)
        return 2
    except InterruptedAfterWriting as exc:
        print(f"ring.bench: interrupted after writing {exc} and its JSON", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        if env_is_root():  # mpirun passes a Ctrl-C to every rank: one line, not one each
            print("ring.bench: interrupted; no result file written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
