"""One series of a sweep: a backend at one (sync, algorithm, N) and one setting of its own
flags (:meth:`Backend.variants`), with the rows and per-call times measured for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from .backends import Backend
from .selection import selected

__all__ = ["Series", "series_of"]


@dataclass
class Series:
    """One (backend, sync, algorithm, N) of the plan and, once measured, its rows and
    per-call times."""

    backend: Backend
    sync: str
    nodes: int
    rows: list
    samples: list
    # A backend's setting measured as its own series (Backend.variants: gpu --graphs 0,1).
    variant: dict = field(default_factory=dict)
    # One of the backend's algorithms, or its own name when it has none (a peer).
    algorithm: str = ""

    @property
    def label(self) -> str:
        sync = "" if self.sync == "none" else f"/{self.sync}"
        algorithm = f"/{self.algorithm}" if self.backend.algorithms else ""
        variant = "".join(f"/{k}={v}" for k, v in self.variant.items())
        return f"{self.backend.name}{sync}{algorithm}/N{self.nodes}{variant}"

    def select(self) -> Backend:
        """The backend, told which of this series' settings its next open and rows use."""
        self.backend.variant = self.variant
        self.backend.algorithm = self.algorithm
        return self.backend


def series_of(plan) -> list[Series]:
    """Every series the run's flags give, in their order; with ``--select``, those it names."""
    every = [
        Series(stage.backend, sync, nodes, [], [], variant, algorithm)
        for stage in plan.stages
        for sync in stage.syncs
        for algorithm in stage.algorithms
        for nodes in stage.nodes
        for variant in stage.backend.variants(plan.config, algorithm)
    ]
    chosen = plan.config.select
    return every if chosen is None else [s for s in every if selected(s, chosen)]
