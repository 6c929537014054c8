"""ring.model.calibration: the measured corrections a fit keeps beside the model, and the
picks of ``auto``'s table that use them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ring.model import ModelInputError, Params, auto, calibration, predict_seconds
from ring.model.data import Group, Point
from ring.model.fit import Fit, Host, fit_group
from ring.model.table import decision_table, fastest, load_fits, save_fits

TRUE = Params(alpha=5e-6, beta=2e-10, gamma=5e-11)
SIZES = tuple(1 << e for e in range(10, 25, 2))  # 1 KiB .. 16 MiB, a factor of 4 apart
SLOW = 1 << 20  # where the machine makes rabenseifner slower than its model says
PENALTY = 1.6


def measured(algorithm: str, nodes: int, nbytes: int) -> float:
    """The model's time, but rabenseifner at 1 MiB PENALTY times slower (what a cache or
    a protocol switch does to one algorithm at one size, which no α-β-γ term follows)."""
    seconds = predict_seconds(TRUE, algorithm, nodes, nbytes)
    return seconds * (PENALTY if algorithm == "rabenseifner" and nbytes == SLOW else 1.0)


def auto_priced(fit: Fit, algorithm: str, nodes: int, size: int, *args, **options) -> float:
    """The time ``auto``'s table prices the call at: the model's times the correction."""
    return fit.predict(algorithm, nodes, size, *args, **options) * fit.correction(
        algorithm, nodes, size, *args, **options
    )


def sweep(noise: float = 0.0, seed: int = 3, repeats: int = 1, sweeps: int = 2) -> Group:
    """``sweeps`` sweeps (the rows' sources) of ``measured``, each of ``repeats`` rows per
    point."""
    rng = np.random.default_rng(seed)
    group = Group({"machine": "synthetic", "backend": "x"}, False, cores=4)
    group.sources = [f"sweep-{k}.csv" for k in range(sweeps)]
    for source in range(sweeps):
        for algorithm in ("ring", "rabenseifner", "recursive-doubling"):
            for nodes in (2, 4):
                for size in SIZES:
                    for _ in range(repeats):
                        seconds = measured(algorithm, nodes, size) * rng.lognormal(0, noise)
                        point = Point(algorithm, nodes, size, seconds, source=source)
                        group.points.append(point)
    return group


@pytest.fixture(scope="module")
def fitted() -> Fit:
    return fit_group(sweep(), draws=0)


def test_measure_is_the_geometric_mean_over_sweeps_of_measured_over_predicted():
    points = [
        Point("ring", 2, 1024, 2.0, source=0),
        Point("ring", 2, 1024, 8.0, source=0),  # sweep 0: 4x
        Point("ring", 2, 1024, 9.0, source=1),  # sweep 1: 9x
        Point("ring", 2, 4096, 3.0, source=0),
        Point("ring", 2, 4096, 3.0, source=1),
        Point("direct", 2, 4096, 5.0, source=1),  # one sweep only: no correction
    ]
    found = calibration.measure(points, lambda p: 1.0 if p.nbytes == 1024 else 2.0)
    assert found == {"ring": {2: ((1024, pytest.approx(6.0)), (4096, pytest.approx(1.5)))}}
    one = calibration.measure(points, lambda p: 1.0, sweeps=1)
    assert one["direct"] == {2: ((4096, pytest.approx(5.0)),)}


def test_a_fit_of_one_sweep_keeps_no_corrections():
    fit = fit_group(sweep(sweeps=1), draws=0)
    assert fit.corrections == {}
    assert auto_priced(fit, "rabenseifner", 4, SLOW) == fit.predict("rabenseifner", 4, SLOW)


def test_factor_interpolates_in_log_size_and_is_one_outside_the_measured_sizes():
    corrections = {"ring": {2: ((1024, 1.0), (4096, 4.0))}}
    assert calibration.factor(corrections, "ring", 2, 1024) == pytest.approx(1.0)
    assert calibration.factor(corrections, "ring", 2, 2048) == pytest.approx(2.0)
    assert calibration.factor(corrections, "ring", 2, 4096) == pytest.approx(4.0)
    for nodes, size, algorithm in ((2, 512, "ring"), (2, 8192, "ring"), (4, 2048, "ring")):
        assert calibration.factor(corrections, algorithm, nodes, size) == 1.0
    assert calibration.factor(corrections, "direct", 2, 2048) == 1.0
    assert calibration.factor({"ring": {2: ((1024, 3.0),)}}, "ring", 2, 1024) == 3.0


def test_a_fit_keeps_what_the_model_does_not_follow(fitted):
    slow = dict(fitted.corrections["rabenseifner"][2])[SLOW]
    assert slow > 1.4  # most of the 1.6x is left to the correction
    for algorithm, by_n in fitted.corrections.items():
        for nodes, sizes in by_n.items():
            assert [s for s, _ in sizes] == list(SIZES)
            for size, ratio in sizes:
                if (algorithm, size) != ("rabenseifner", SLOW):
                    assert ratio == pytest.approx(1.0, abs=0.15), (algorithm, nodes, size)


def test_corrected_predictions_are_the_sweeps_times_and_the_model_stays_the_model(fitted):
    for algorithm in ("ring", "rabenseifner", "recursive-doubling"):
        for size in SIZES:
            corrected = auto_priced(fitted, algorithm, 4, size)
            assert corrected == pytest.approx(measured(algorithm, 4, size), rel=1e-6)
    model = fitted.predict("rabenseifner", 2, SLOW)
    assert model < measured("rabenseifner", 2, SLOW) / 1.4
    # At N = 8 nothing was measured: the model alone.
    assert auto_priced(fitted, "ring", 8, SLOW) == fitted.predict("ring", 8, SLOW)


def test_corrections_apply_only_on_a_machine_like_the_fitted_one_with_its_options(fitted):
    model = fitted.predict("rabenseifner", 2, SLOW)
    assert auto_priced(fitted, "rabenseifner", 2, SLOW, Host(cores=4)) > model
    assert auto_priced(fitted, "rabenseifner", 2, SLOW, Host(cores=8)) == (
        fitted.predict("rabenseifner", 2, SLOW, Host(cores=8))
    )
    given = auto_priced(fitted, "ring-segmented", 2, SLOW, segment_bytes=1 << 16)
    assert given == fitted.predict("ring-segmented", 2, SLOW, segment_bytes=1 << 16)


def test_the_table_picks_by_the_measured_times_where_the_model_is_wrong(fitted):
    # At N = 4 rabenseifner takes 4 steps where the ring takes 6, for the same bytes: the
    # theory's pick at every size; measured, the ring is faster at 1 MiB.
    algorithms = ["rabenseifner", "recursive-doubling", "ring"]
    for size in (SLOW // 4, SLOW, SLOW * 4):
        theory = min(algorithms, key=lambda a: predict_seconds(TRUE, a, 4, size))
        assert theory == "rabenseifner"
    truth = min(algorithms, key=lambda a: measured(a, 4, SLOW))
    assert truth == "ring"
    assert fastest(fitted, algorithms, 4, SLOW) == "ring"
    rows = decision_table(fitted, algorithms, nodes=(4,), sizes=SIZES)
    assert [pick for _, low, high, pick in rows if low <= SLOW <= high] == ["ring"]
    # Where the sweep measured what the model says, the model's pick stands.
    for size in (SLOW // 4, SLOW * 4):
        model = min(algorithms, key=lambda a: fitted.predict(a, 4, size))
        assert fastest(fitted, algorithms, 4, size) == model


def two_algorithm_fit(faster_by: float) -> Fit:
    """A fit whose model has the ring ahead of recursive doubling at N = 2, 1 MiB (one α
    more, half the bytes reduced: 246 against 267 µs), and whose rows measured recursive
    doubling ``faster_by`` ahead of the ring there."""
    fit = Fit(
        key={"machine": "synthetic", "backend": "x"},
        shared=False,
        params=TRUE,
        interval={},
        gamma_source="synthetic",
        algorithms=["recursive-doubling", "ring"],
        nodes=[2],
        sizes=[SLOW],
    )
    ring, doubling = (fit.predict(a, 2, SLOW) for a in ("ring", "recursive-doubling"))
    assert doubling > 1.05 * ring
    fit.corrections = {
        "ring": {2: ((SLOW, 1.0),)},
        "recursive-doubling": {2: ((SLOW, ring / doubling / faster_by),)},
    }
    return fit


@pytest.mark.parametrize(("faster_by", "pick"), [(1.03, "ring"), (1.10, "recursive-doubling")])
def test_corrections_rule_out_clearly_slower_algorithms_and_do_not_rank_near_ones(faster_by, pick):
    fit = two_algorithm_fit(faster_by)
    corrected = {a: auto_priced(fit, a, 2, SLOW) for a in fit.algorithms}
    assert corrected["ring"] / corrected["recursive-doubling"] == pytest.approx(faster_by)
    assert fastest(fit, fit.algorithms, 2, SLOW) == pick


def test_auto_runs_the_corrected_pick(tmp_path, monkeypatch):
    fit = fit_group(sweep(), draws=0)
    fit.key["backend"] = "cpu"
    fit.cores = auto.local_cores()
    path = tmp_path / "fit.json"
    save_fits(path, [fit], [])
    monkeypatch.setenv(auto.FIT_ENV, str(path))
    auto.reset()
    try:
        host = auto.local_host()
        for size in SIZES:
            pick = fastest(fit, fit.algorithms, 4, size, host)
            assert auto.choose("cpu", "allreduce", 4, size) == pick
        assert auto.choose("cpu", "allreduce", 4, SLOW) == "ring"
    finally:
        auto.reset()


def test_noisy_repeats_average_out(fitted):
    noisy = fit_group(sweep(noise=0.1, repeats=6, seed=11), draws=0)
    slow = dict(noisy.corrections["rabenseifner"][2])[SLOW]
    assert slow == pytest.approx(dict(fitted.corrections["rabenseifner"][2])[SLOW], rel=0.15)


def test_corrections_survive_the_fit_file(fitted, tmp_path):
    path = tmp_path / "fit.json"
    save_fits(path, [fitted], [])
    (again,) = load_fits(path)
    assert again.corrections == fitted.corrections
    assert auto_priced(again, "rabenseifner", 2, SLOW) == pytest.approx(
        auto_priced(fitted, "rabenseifner", 2, SLOW)
    )
    document = json.loads(path.read_text())
    del document["fits"][0]["corrections"]  # a file written before them: none
    path.write_text(json.dumps(document))
    (older,) = load_fits(path)
    assert older.corrections is None
    assert auto_priced(older, "rabenseifner", 2, SLOW) == older.predict("rabenseifner", 2, SLOW)


@pytest.mark.parametrize(
    "bad",
    [
        {"ring": {"2": [[1024, 0.0]]}},
        {"ring": {"2": [[1024, math.inf]]}},
        {"ring": {"2": [[4096, 1.0], [1024, 1.0]]}},
        ["ring"],
    ],
)
def test_a_bad_correction_in_a_fit_file_is_refused_in_one_line(bad, fitted, tmp_path):
    path = tmp_path / "fit.json"
    save_fits(path, [fitted], [])
    document = json.loads(path.read_text())
    document["fits"][0]["corrections"] = bad
    path.write_text(json.dumps(document))
    with pytest.raises(ModelInputError) as err:
        load_fits(path)
    assert "\n" not in str(err.value) and "correction" in str(err.value)


def test_cli_says_what_corrections_a_fit_has_and_predict_prints_both_times(
    fitted, tmp_path, capsys
):
    from ring.model.__main__ import main

    for sweeps, said in ((2, "points of >= 2 sweeps"), (1, "corrections = none")):
        group = sweep(sweeps=sweeps)
        for k in range(sweeps):
            rows = [p for p in group.points if p.source == k]
            path = tmp_path / f"sweep-{k}.csv"
            lines = [
                "backend,sync,algorithm,executor,buffers,nodes,dtype,op,bytes,count,iters,time_us"
            ]
            lines += [
                f"x,none,{p.algorithm},,,{p.nodes},float32,sum,{p.nbytes},{p.nbytes // 4},5,"
                f"{p.seconds * 1e6!r}"
                for p in rows
            ]
            path.write_text("\n".join(lines) + "\n")
        csvs = [str(tmp_path / f"sweep-{k}.csv") for k in range(sweeps)]
        assert main(["fit", *csvs, "--out", str(tmp_path / "fit.json")]) == 0
        assert said in capsys.readouterr().out
    save_fits(tmp_path / "fitted.json", [fitted], [])
    argv = ["predict", "--fit", str(tmp_path / "fitted.json"), "--algorithm", "rabenseifner"]
    assert main([*argv, "--nodes", "4", "--bytes", "1MiB"]) == 0
    out = capsys.readouterr().out
    model = fitted.predict("rabenseifner", 4, SLOW) * 1e6
    corrected = auto_priced(fitted, "rabenseifner", 4, SLOW) * 1e6
    assert f"{model:.1f} us; {corrected:.1f} us as auto prices it" in out


def test_the_report_says_where_corrections_change_the_models_pick(fitted, tmp_path):
    from ring.report.words.cost_model import cost_model

    save_fits(tmp_path / "model_fit.json", [fitted], [])
    section = cost_model([(fitted, tmp_path / "model_fit.json")])
    (table,) = [t for t in section.tables if t.title.startswith("What `auto` picks")]
    assert "did not measure > 5% slower" in table.title
    said = table.note.split("change the model's pick: ")[1].split(". Crossovers")[0]
    # 1 MiB measured, 512 KiB and 2 MiB corrected by the interpolation towards it (at 2 MiB
    # the two algorithms are 1.4 % apart, so the model's own pick there may go either way).
    assert said in (
        "N=4 512 KiB – 1 MiB: ring (the model: rabenseifner)",
        "N=4 512 KiB – 2 MiB: ring (the model: rabenseifner)",
    )
