"""``python -m ring.bench.seed_cpp``: build the compiled peer now (scripts/setup.sh runs it),
so the first timed run does not wait for the compiler.  Exit 1 with one line if it cannot."""

import sys

from .build import SeedBuildError, build_library


def main() -> int:
    try:
        path = build_library()
    except SeedBuildError as exc:
        print(f"seed-cpp: not built: {exc}", file=sys.stderr)
        return 1
    print(f"seed-cpp: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
