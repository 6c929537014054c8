"""How numbers read in the report: three significant digits, binary size units."""

from __future__ import annotations

import math

from ...bench.flags import format_bytes  # sizes as the harness shows them
from ...nsys.markdown import markdown_table

__all__ = ["format_bytes", "format_fraction", "format_number", "format_ratio", "markdown_table"]


def format_number(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, without exponent notation."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    rounded = round(value, decimals)
    # Rounding can carry into the next decade (9.996 -> 10.0); recount the decimals.
    if rounded != 0 and math.floor(math.log10(abs(rounded))) != magnitude:
        decimals = max(0, decimals - 1)
    return f"{value:,.{decimals}f}"


def format_ratio(value: float) -> str:
    return f"{format_number(value)}×"


def format_fraction(value: float) -> str:
    return f"{format_number(100 * value)} %"
