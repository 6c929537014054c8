"""The harness's flag primitives, shared by every subcommand: the input error, the parser
that raises it, and the checks of a size, a whole number and a comma list.

Bad input ends with one line on stderr and exit code 2, before anything is measured.
"""

from __future__ import annotations

import argparse
import re

__all__ = [
    "BenchInputError",
    "BenchParser",
    "format_bytes",
    "int_flag",
    "parse_size",
    "split_list",
]

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


class BenchInputError(ValueError):
    """Bad input to the harness: reported as one line, exit code 2, no output file."""


class BenchParser(argparse.ArgumentParser):
    """Turns argparse's usage errors into :class:`BenchInputError` (one line, exit 2)."""

    def error(self, message: str):
        raise BenchInputError(message)


def parse_size(text: str) -> int:
    """Bytes in ``text``: a plain integer or one with a binary suffix (``1K``, ``64M``, ``1G``)."""
    match = _SIZE.match(text)
    if not match:
        raise BenchInputError(
            f"cannot parse size {text!r}: use a whole number of bytes with an optional "
            "K, M, G or T suffix (binary: 1K = 1024), e.g. 64M"
        )
    return int(match.group(1)) * _SUFFIXES[match.group(2).upper()]


def int_flag(text: str, flag: str, minimum: int) -> int:
    """``text`` as a whole number of at least ``minimum``, or a one-line error naming ``flag``."""
    try:
        value = int(text)
    except ValueError:
        raise BenchInputError(f"{flag} {text!r} is not a whole number") from None
    if value < minimum:
        raise BenchInputError(f"{flag} must be >= {minimum}, got {value}")
    return value


def split_list(text: str, flag: str) -> tuple[str, ...]:
    """The items of a comma list, in order, each once; an empty item is an error."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise BenchInputError(f"{flag} {text!r} has an empty item: use a comma list like 2,4")
    return tuple(dict.fromkeys(items))


def format_bytes(size: int) -> str:
    """Exact binary units where the size is a whole multiple (``256 MiB``), else bytes."""
    size = int(size)
    unit = 0
    value = size
    while unit < len(_UNITS) - 1 and value >= 1024 and value % 1024 == 0:
        value //= 1024
        unit += 1
    return f"{value:,} {_UNITS[unit]}"
