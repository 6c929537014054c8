"""``python -m ring.study.conditions FILE.json --set NAME --rate R --hosts H --per-host R``:
the conditions of a run across emulated hosts (ring.study.hosts.conditions) written into
the harness's result document, as its ``conditions`` key, so the link rate and the hosts
travel with the measurement."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .hosts import conditions

__all__ = ["main"]


def _record(args: argparse.Namespace) -> int:
    path = Path(args.json)
    meta = json.loads(path.read_text(encoding="utf-8"))
    meta["conditions"] = conditions(meta, args.set, args.rate, args.hosts, args.per_host)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    print(f"{path}: conditions {json.dumps(meta['conditions'])}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ring.study.conditions", description=__doc__)
    record = parser
    record.add_argument("json", help="the harness's FILE.json of a run across hosts")
    record.add_argument("--set", required=True, help="the hosts' set (hosts.sh --name)")
    record.add_argument("--rate", required=True, help="the links' tc rate, e.g. 1gbit")
    record.add_argument("--hosts", type=int, required=True)
    record.add_argument("--per-host", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        return _record(args)
    except (OSError, ValueError) as exc:
        print(f"ring.study.conditions: {args.json}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
