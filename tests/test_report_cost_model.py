"""The report's "Cost model" section: built from the fits of this build's screens, the
paper alone where there is none."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_model import TRUE, synthetic

from ring.model import auto
from ring.model.fit import fit_group
from ring.model.table import load_fits, save_fits
from ring.report.derive.original import links_file
from ring.report.words.cost_model import HELD_OUT_MIN_BYTES, cost_model
from ring.report.words.fmt import format_number

ROOT = Path(__file__).resolve().parents[1]


def _fits(path: Path) -> list:
    return [(fit, path) for fit in load_fits(path)]


def _table(section, start: str):
    return next(t for t in section.tables if t.title.startswith(start))


@pytest.mark.slow
def test_section_builds_from_the_fits_given(tmp_path):
    given = [pair for p in auto.default_fit_files() for pair in _fits(p)]
    section = cost_model(given)
    assert "the fit of this build's screens" in section.source
    parameters = _table(section, "Fitted parameters")
    assert len(parameters.rows) == sum(len(f.regimes()) for f, _ in given)
    assert any(", inline (≤ 4 MiB per node)" in row[0] for row in parameters.rows)
    held = _table(section, "Held-out check")
    for (fit, _), row in zip(given, held.rows, strict=True):
        errors = [abs(h.error) for h in fit.held_out if h.nbytes >= HELD_OUT_MIN_BYTES]
        assert row[1] == str(len(errors))
    picks = [t for t in section.tables if t.title.startswith("What `auto` picks")]
    assert len(picks) == len(given)
    for table, (fit, _) in zip(picks, given, strict=True):
        assert {row[0] for row in table.rows} == {"2", "4", "8"}
        assert {row[2] for row in table.rows} <= set(fit.algorithms)
    published = _table(section, "The model beside published NCCL figures")
    assert published.rows and all(row[5].endswith("%") for row in published.rows)
    busbw = _table(section, "On paper")
    assert {row[1] for row in busbw.rows} == {str(1 << k) for k in range(1, 11)}


def test_without_a_fit_the_section_says_so_and_keeps_the_paper():
    section = cost_model([])
    assert "no fit of this build's screens was given" in section.source
    assert [t.title.split(":")[0] for t in section.tables][:1] == ["On paper"]


def test_missing_links_file_is_said_not_raised(tmp_path):
    section = cost_model([], links=tmp_path / "none.yaml")
    assert any("paper predictions are absent" in s for s in section.sentences)
    assert not any(t.title.startswith("On paper") for t in section.tables)


@pytest.mark.slow
def test_parameters_table_shows_sigma_and_when_it_applies(tmp_path):
    truth = TRUE._replace(sigma=1.5)
    oversubscribed = fit_group(synthetic(["ring", "rabenseifner"], 0.01, cores=4, truth=truth))
    roomy = fit_group(synthetic(["ring", "rabenseifner"], 0.01, cores=8))
    roomy.key = {**roomy.key, "backend": "y"}
    save_fits(tmp_path / "model_fit.json", [oversubscribed, roomy], [])
    section = cost_model(_fits(tmp_path / "model_fit.json"))
    table = _table(section, "Fitted parameters")
    column = next(i for i, name in enumerate(table.header) if name.startswith("σ"))
    fitted, fixed = (row[column] for row in table.rows)
    # Neither is an inline regime: no per-node term.
    assert [row[-1] for row in table.rows] == ["n/a", "n/a"]
    low, high = oversubscribed.interval["sigma"]
    assert fitted.startswith(f"{format_number(oversubscribed.params.sigma)} [")
    assert f"[{format_number(low)}, {format_number(high)}]" in fitted
    assert fitted.endswith("when N / cores > 1 (4 cores)")
    assert fixed == "0 (fixed at 0: no row has more nodes than cores)"
    assert "1 + σ·(p − 1)" in table.note


def test_factors_table_shows_each_measured_algorithm_with_its_interval(tmp_path):
    fit = fit_group(synthetic(["ring", "recursive-doubling", "rabenseifner"], 0.01))
    save_fits(tmp_path / "model_fit.json", [fit], [])
    table = _table(cost_model(_fits(tmp_path / "model_fit.json")), "Per-algorithm factors")
    assert [row[1] for row in table.rows] == ["rabenseifner", "recursive-doubling", "ring"]
    for row in table.rows:
        factors, spans = fit.factors[row[1]], fit.factor_interval[row[1]]
        for cell, term in zip(row[2:], ("steps", "bytes"), strict=True):
            low, high = spans[term]
            want = f"{format_number(getattr(factors, term))} "
            assert cell == want + f"[{format_number(low)}, {format_number(high)}]"
    assert "κ = η = 1" in table.note


def test_the_links_file_is_named_from_the_project_not_the_machine(tmp_path, monkeypatch):
    # The workflow runs in its own directory, a clean clone often in a temporary one: the
    # report's heading names config/links.yaml, not that folder.
    monkeypatch.chdir(tmp_path)
    section = cost_model([])
    assert _table(section, "On paper").title.endswith("parameters of `config/links.yaml`")
    elsewhere = tmp_path / "mine" / "links.yaml"  # in the working directory: from there
    elsewhere.parent.mkdir()
    shutil.copy(links_file(), elsewhere)
    section = cost_model([], links=elsewhere)
    assert _table(section, "On paper").title.endswith("parameters of `mine/links.yaml`")
