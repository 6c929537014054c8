"""The model across emulated hosts (``python -m ring.model hosts``): its fitted levels per
link rate and every row's prediction beside its measured time, read and checked."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .files import ReportInputError

__all__ = ["HostsModel", "load_hosts_model"]

KIND = "hosts-model"
RATE = re.compile(r"[0-9]+(?:\.[0-9]+)?[kmg]bit")
LEVEL_KEYS: tuple[str, ...] = (
    *("rate", "rate_GBps", "alpha_net_s", "beta_net_s_per_B", "alpha_shm_s"),
    *("beta_shm_s_per_B", "net_rows", "shm_rows", "shm_fitted", "shm_oversubscribed"),
)
ROW_KEYS: tuple[str, ...] = (
    *("rate", "hosts", "per_host", "cores", "oversubscribed", "backend", "algorithm"),
    *("resolved", "nbytes", "measured_us", "predicted_us", "ratio", "fitted", "why_none"),
)


@dataclass(frozen=True)
class HostsModel:
    path: Path
    levels: list[dict]
    rows: list[dict]
    inputs: list[dict]


def _check(path: Path, entries: object, keys: tuple[str, ...], what: str) -> list[dict]:
    if not isinstance(entries, list) or not entries:
        raise ReportInputError(f"{path}: no {what}")
    for entry in entries:
        missing = [k for k in keys if not isinstance(entry, dict) or k not in entry]
        if missing:
            raise ReportInputError(f"{path}: a {what} entry lacks {', '.join(missing)}")
        if not RATE.fullmatch(str(entry["rate"])):
            raise ReportInputError(f"{path}: rate {entry['rate']!r} is not a tc rate (1gbit)")
    return entries


def load_hosts_model(path: str | Path) -> HostsModel:
    """Read a hosts model; a missing, malformed or foreign file raises ReportInputError."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportInputError(f"{path}: cannot read the hosts model ({exc})") from None
    if not isinstance(document, dict) or document.get("kind") != KIND:
        raise ReportInputError(f"{path}: not a model across hosts (python -m ring.model hosts)")
    levels = _check(path, document.get("levels"), LEVEL_KEYS, "level")
    rows = _check(path, document.get("rows"), ROW_KEYS, "row")
    return HostsModel(path, levels, rows, list(document.get("inputs") or []))
