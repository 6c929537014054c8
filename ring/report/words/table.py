"""A table of the report, as both templates show it."""

from __future__ import annotations

from dataclasses import dataclass, field

from .fmt import markdown_table

__all__ = ["Table"]


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""
    preformatted: list[tuple[str, str]] = field(default_factory=list)

    @property
    def markdown(self) -> str:
        return markdown_table(self.header, self.rows)
