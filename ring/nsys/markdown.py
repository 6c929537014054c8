"""How the profile summary writes numbers and tables: µs, percentages, MB, Markdown."""

from __future__ import annotations

__all__ = ["mb", "pct", "table", "us"]


def us(ns) -> str:
    return "" if ns is None or ns == "" else f"{ns / 1e3:,.1f}"


def pct(share) -> str:
    return "" if share is None or share == "" else f"{100 * share:.1f} %"


def mb(nbytes) -> str:
    return "" if nbytes is None or nbytes == "" else f"{nbytes / 1e6:,.3f}"


def table(header: list[str], rows: list[list]) -> list[str]:
    def esc(value) -> str:
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(esc(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]
