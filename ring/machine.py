"""The cache sizes the machine reports, which size ring-segmented's blocks and the CPU
backend's tiles."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

__all__ = [
    "DEFAULT_L2_BYTES",
    "DEFAULT_LAST_LEVEL_BYTES",
    "SYSFS_CACHE",
    "cache_bytes",
    "probe_cache_bytes",
    "read_cache_sizes",
]

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
# What a machine that reports nothing (no sysfs and no sysconf, e.g. macOS) is taken to
# have: a per-core L2 and a shared last level typical of a current server core.
DEFAULT_L2_BYTES = 1 << 20
DEFAULT_LAST_LEVEL_BYTES = 32 << 20
_SCALE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def read_cache_sizes(root: Path) -> dict[int, int]:
    """{level: bytes} of the data and unified caches listed under ``root`` (sysfs'
    ``cpu0/cache``: ``index*/{level,type,size}``); entries that cannot be read are skipped."""
    sizes: dict[int, int] = {}
    for index in sorted(root.glob("index*")) if root.is_dir() else ():
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        digits, unit = (size[:-1], size[-1]) if size[-1:] in _SCALE else (size, "")
        if kind == "Instruction" or not digits.isdigit():
            continue
        sizes[level] = int(digits) * _SCALE.get(unit, 1)
    return sizes


def probe_cache_bytes(root: Path = SYSFS_CACHE) -> tuple[int, int]:
    """(per-core L2, shared last-level) cache bytes: sysfs under ``root``, else
    ``os.sysconf``, else :data:`DEFAULT_L2_BYTES` and :data:`DEFAULT_LAST_LEVEL_BYTES`."""
    sizes = read_cache_sizes(root)
    names = {2: "SC_LEVEL2_CACHE_SIZE", 3: "SC_LEVEL3_CACHE_SIZE"}
    for level, name in names.items():
        if level not in sizes and name in os.sysconf_names:
            value = os.sysconf(name)
            if value > 0:
                sizes[level] = value
    l2 = sizes.get(2, DEFAULT_L2_BYTES)
    return l2, max(sizes.values(), default=DEFAULT_LAST_LEVEL_BYTES)


@lru_cache(maxsize=1)
def cache_bytes() -> tuple[int, int]:
    """:func:`probe_cache_bytes` of this machine, read once."""
    return probe_cache_bytes()
