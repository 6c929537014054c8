"""Session fixtures of the report tests (tests/test_report*.py): one harness run and one
report, shared by every module that asks for them."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_helpers import THREAD_BACKENDS, run_bench, run_tables

from ring.report import build_report, collect_inputs


@pytest.fixture(scope="session")
def results(tmp_path_factory) -> Path:
    """``results/`` as the workflow lays it out: cpu/sweep_n<N>_float32.csv (the ring and
    numpy-direct in one run, with its samples) + profile."""
    root = tmp_path_factory.mktemp("results")
    for nodes in (2, 4):
        run_bench(
            root / "cpu" / f"sweep_n{nodes}_float32.csv",
            "--backend",
            ",".join(["cpu", *THREAD_BACKENDS]),
            "--nodes",
            str(nodes),
            "--sync",
            "pairwise,barrier",
        )
    run_tables(root / "profiles" / "cpu")
    return root


@pytest.fixture(scope="session")
def built(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("built")
    chosen = collect_inputs(results=results)
    result = build_report(
        chosen["sweeps"],
        profiles=chosen["profiles"],
        figures_dir=out / "figures",
        out_dir=out / "report",
    )
    return result


@pytest.fixture(scope="session")
def markdown(built) -> str:
    return built.markdown.read_text(encoding="utf-8")
