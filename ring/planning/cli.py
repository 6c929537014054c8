"""``python -m ring.wisdom show | export FILE | import FILE | forget``: the wisdom file
(:mod:`ring.planning.store`) from the command line.  Every error is one line on stderr: an
import of a file it cannot use here, or that holds a plan it cannot run, fails (exit 1) and
imports nothing, as does an export it cannot write; a command line it does not take exits 2.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from . import store
from .store import (
    WISDOM_ENV,
    Unusable,
    Wisdom,
    WisdomWarning,
    dropped_text,
    load,
    locked,
    wisdom_path,
)

__all__ = ["USAGE", "main"]

USAGE = "usage: python -m ring.wisdom show | export FILE | import FILE | forget"


def main(argv: list[str] | None = None) -> int:
    """``python -m ring.wisdom show | export FILE | import FILE | forget``: each error is
    one line on stderr (exit 1; 2 for a command line it does not take)."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        print(__doc__)
        print(store.__doc__)
        return 0
    path = wisdom_path()
    if path is None:
        print(f"ring.wisdom: {WISDOM_ENV}=off: no wisdom file", file=sys.stderr)
        return 2
    if not args or args[0] not in ("show", "export", "import", "forget"):
        print(USAGE, file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    wanted = 1 if command in ("export", "import") else 0
    if len(rest) != wanted:
        print(
            f"ring.wisdom: {command} takes {'one FILE' if wanted else 'no FILE'}", file=sys.stderr
        )
        return 2
    with warnings.catch_warnings(record=True) as said:  # each said in one line below
        warnings.simplefilter("always", WisdomWarning)
        code = _command(command, path, rest)
    for warning in said:
        if issubclass(warning.category, WisdomWarning):
            print(f"ring.wisdom: {warning.message}", file=sys.stderr)
    return code


def _command(command: str, path: Path, rest: list[str]) -> int:
    if command == "forget":
        try:
            with locked(path):
                path.unlink(missing_ok=True)
        except OSError as exc:
            print(f"ring.wisdom: forget: {path}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        return 0
    if command == "import":
        theirs = _imported(Path(rest[0]))
        if theirs is None:
            return 1
        return 0 if Wisdom(path).merge(theirs) else 1
    mine = Wisdom(path)
    if mine.problem is not None:  # said as a warning: nothing to show or export
        return 1
    if command == "show":
        for key, plan in sorted(mine.plans.items()):
            print(f"{key}: {'/'.join(map(str, plan['choice']))}")
        return 0
    return 0 if mine.write(Path(rest[0]), mine.plans) else 1


def _imported(source: Path) -> dict | None:
    """The plans of ``source`` for ``import``; None, said in one line, where there is no
    such file or it cannot be used here (unreadable, not wisdom, of another host or
    version, or holding a plan this library cannot run): importing less than the file
    holds is not a success."""
    if not source.is_file():
        print(
            f"ring.wisdom: {source}: {'not a file' if source.exists() else 'no such file'}",
            file=sys.stderr,
        )
        return None
    try:
        plans, dropped = load(source, Wisdom.header())
    except Unusable as exc:
        print(f"ring.wisdom: not imported: {exc}", file=sys.stderr)
        return None
    if dropped:
        print(f"ring.wisdom: not imported: {dropped_text(source, dropped)}", file=sys.stderr)
        return None
    return plans
