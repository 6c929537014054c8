"""Fixtures shared by test modules: the report tests' results (tiny runs in the workflow's
layout) and one report (per session), and the workflow tests' copy of the workflow and stub
executables (per module).

Two tiers: ``pytest -m "not slow"`` runs the unit tests in a couple of minutes; ``pytest``
(.ci/run) runs everything. A test that starts Snakemake, mypy, pre-commit or a wheel build
fails unless marked slow (tests/tiers.py).

Every test plans ``algorithm="auto"`` afresh: its wisdom file (ring.planning.store) is a file of its
own, so no plan measured in one test, or left in the user's cache, decides another."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiers
from report_helpers import make_results
from workflow_helpers import copy_workflow

from ring.planning import store
from ring.report import build_report, collect_inputs


@pytest.fixture(scope="session")
def results(tmp_path_factory) -> Path:
    """``results/`` as the workflow lays it out, on tiny sizes (report_helpers.make_results):
    sweeps, a screen, its confirmation launch set, one size alone, the fit, a profile."""
    return make_results(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="session")
def built(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("built")
    chosen = collect_inputs(results)
    record = chosen.pop("not_measured")
    return build_report(
        chosen.pop("runs"),
        **chosen,
        not_measured=record[0] if record else None,
        figures_dir=out / "figures",
        out_dir=out / "report",
    )


@pytest.fixture(scope="session")
def markdown(built) -> str:
    return built.markdown.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def appendix(built) -> str:
    return built.appendix.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("workflow"))


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> dict[str, str]:
    """Executables that exist (for the DAG-build checks) but are never run in a dry run."""
    folder = tmp_path_factory.mktemp("bin")
    paths = {}
    for name in ("nsys", "mpirun"):
        path = folder / name
        path.write_text("#!/bin/sh\necho 'stub: not for running' >&2\nexit 99\n")
        path.chmod(0o755)
        paths[name] = str(path)
    return paths


@pytest.fixture(autouse=True)
def own_wisdom(tmp_path_factory, monkeypatch):
    monkeypatch.setenv(store.WISDOM_ENV, str(tmp_path_factory.mktemp("wisdom") / "wisdom.json"))
    store.forget_process()
    yield
    store.forget_process()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with tiers.guard(item):  # the quick tier starts no end-to-end tool (tests/tiers.py)
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with tiers.guard(item):
        return (yield)
