"""How the profile summary writes numbers and tables: µs, percentages, MB, Markdown.

:func:`markdown_table` is the project's one Markdown table writer (``ring.report.words.fmt``
re-exports it): it lives here because ``ring.nsys`` must not need the report's pandas.
"""

from __future__ import annotations

__all__ = ["markdown_table", "mb", "pct", "table", "us"]


def us(ns) -> str:
    return "" if ns is None or ns == "" else f"{ns / 1e3:,.1f}"


def pct(share) -> str:
    return "" if share is None or share == "" else f"{100 * share:.1f} %"


def mb(nbytes) -> str:
    return "" if nbytes is None or nbytes == "" else f"{nbytes / 1e6:,.3f}"


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured Markdown table; ``|`` inside cells is escaped."""

    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(cell(h) for h in header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    lines.extend("| " + " | ".join(cell(c) for c in row) + " |" for row in rows)
    return "\n".join(lines)


def table(header: list[str], rows: list[list]) -> list[str]:
    """:func:`markdown_table` as the summary's lines, with the blank line after it."""
    return [*markdown_table(header, rows).split("\n"), ""]
