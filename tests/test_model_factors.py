"""ring.model's per-algorithm factors: recovered from data, saved and loaded, used by the
decision table, and the check of a fit's picks on a run (``check-picks``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ring.model import Params, auto, predict_seconds
from ring.model.__main__ import main
from ring.model.auto import DEFAULTS
from ring.model.costs import Factors
from ring.model.data import Group, Point
from ring.model.fit import FACTORS_ABSENT, Fit, Host, fit_group
from ring.model.table import decision_table, fastest, load_fits, save_fits

TRUE = Params(alpha=7e-6, beta=2.5e-10, gamma=6e-11)
# How far each algorithm's implementation is from its coefficients; the ring is the theory.
DEPARTS = {
    "ring": Factors(1.0, 1.0),
    "recursive-doubling": Factors(1.6, 0.8),
    "rabenseifner": Factors(0.7, 1.3),
    "direct": Factors(1.2, 1.1),
}


def departing_group(noise: float = 0.01, seed: int = 3, nodes=(2, 3, 4, 8)) -> Group:
    """Points of TRUE scaled by DEPARTS; a non-power-of-two N (3) tells β + γ and
    recursive doubling's η apart (ring.model.efficiency.held_gamma)."""
    rng = np.random.default_rng(seed)
    group = Group({"machine": "synthetic", "backend": "x"}, shared=False)
    for algorithm, factors in DEPARTS.items():
        for n in nodes:
            for size in (1 << e for e in range(10, 28)):
                exact = predict_seconds(TRUE, algorithm, n, size, factors=factors)
                group.points.append(Point(algorithm, n, size, exact * rng.lognormal(0, noise)))
    return group


@pytest.mark.slow
def test_fit_recovers_each_algorithms_factors():
    fit = fit_group(departing_group())
    assert set(fit.factors) == set(DEPARTS) and fit.factor_source.startswith("fitted")
    for algorithm, want in DEPARTS.items():
        got = fit.factors[algorithm]
        np.testing.assert_allclose(got, want, rtol=0.05, err_msg=algorithm)
        for term in ("steps", "bytes"):
            low, high = fit.factor_interval[algorithm][term]
            assert low <= getattr(got, term) <= high, (algorithm, term)
    np.testing.assert_allclose(fit.params[:3], TRUE[:3], rtol=0.05)
    # Without factors the same data misleads the joint fit.
    theory = fit_group(departing_group(), form="theory")
    assert theory.factors == {} and max(abs(h.error) for h in theory.held_out) > 0.1
    assert max(abs(h.error) for h in fit.held_out) < 0.1


@pytest.mark.slow
def test_crowded_rows_get_factors_of_their_own():
    """Past one node per core an algorithm's rows get their own factors (ring.model.
    efficiency.factor_rows), the ring's held at 1 there too so σ stays its slow-down: an
    algorithm whose one busy node leaves its core-mates idle (reduce-broadcast's node 0)
    is slowed less than σ says, which one factor for every N could not follow."""
    truth = Params(alpha=7e-6, beta=2.5e-10, gamma=6e-11, sigma=0.8)
    crowded = {"ring": Factors(), "recursive-doubling": Factors(0.5, 0.6)}
    rng = np.random.default_rng(5)
    group = Group({"machine": "synthetic", "backend": "x"}, shared=False, cores=2)
    for algorithm in crowded:
        for n in (2, 3, 4, 8):
            per_core = n / 2
            factors = crowded[algorithm] if per_core > 1 else DEPARTS[algorithm]
            for size in (1 << e for e in range(10, 28)):
                exact = predict_seconds(
                    truth, algorithm, n, size, nodes_per_core=per_core, factors=factors
                )
                point = Point(algorithm, n, size, exact * rng.lognormal(0, 0.01), per_core)
                group.points.append(point)
    fit = fit_group(group)
    names = {"recursive-doubling", "recursive-doubling crowded", "ring", "ring crowded"}
    assert set(fit.factors) == names
    assert fit.factors["ring"] == fit.factors["ring crowded"] == Factors()
    np.testing.assert_allclose(
        fit.factors["recursive-doubling"], DEPARTS["recursive-doubling"], rtol=0.05
    )
    np.testing.assert_allclose(fit.factors["recursive-doubling crowded"], (0.5, 0.6), rtol=0.05)
    assert fit.params.sigma == pytest.approx(0.8, rel=0.05)
    # Each prediction takes its regime's factors: 4 nodes on 2 cores are crowded, on 8 not.
    for cores, name in ((2, "recursive-doubling crowded"), (8, "recursive-doubling")):
        factors = fit.factors[name]
        want = predict_seconds(
            fit.params, "recursive-doubling", 4, 1 << 20, nodes_per_core=4 / cores, factors=factors
        )
        got = fit.predict("recursive-doubling", 4, 1 << 20, Host(cores=cores))
        assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.slow
def test_gamma_is_held_where_the_factors_would_absorb_it():
    fit = fit_group(departing_group(nodes=(2, 4, 8)))
    assert "held while the per-algorithm factors" in fit.gamma_source
    assert "held while" not in fit_group(departing_group()).gamma_source
    # Held or not, the measured algorithms' times are followed.
    assert max(abs(h.error) for h in fit.held_out) < 0.1


@pytest.mark.slow
def test_factors_round_trip_and_an_older_file_loads_as_one(tmp_path):
    fit = fit_group(departing_group())
    save_fits(tmp_path / "new.json", [fit], [])
    (again,) = load_fits(tmp_path / "new.json")
    assert again.factors == fit.factors and again.factor_interval == fit.factor_interval
    document = json.loads((tmp_path / "new.json").read_text())
    for key in ("factors", "factor_interval", "factor_source"):
        del document["fits"][0][key]
    (tmp_path / "old.json").write_text(json.dumps(document))
    (old,) = load_fits(tmp_path / "old.json")
    assert old.factors == {} and old.factor_source == FACTORS_ABSENT
    assert old.factors_of("direct") == Factors(1.0, 1.0)
    want = predict_seconds(old.params, "direct", 4, 1 << 20)
    assert old.predict("direct", 4, 1 << 20) == pytest.approx(want, rel=1e-12)
    # The committed fit of the GPU machine loads, whatever it was written with.
    for gpu in load_fits(DEFAULTS / "nvidia-h200" / "model_fit.json"):
        assert all(f == gpu.factors_of(a) for a, f in gpu.factors.items())


@pytest.mark.slow
def test_unmeasured_algorithm_is_priced_by_the_theory_and_said_so(tmp_path, capsys):
    fit = fit_group(departing_group())
    assert "hierarchical" not in fit.factors
    want = predict_seconds(fit.params, "hierarchical", 4, 1 << 20)
    assert fit.predict("hierarchical", 4, 1 << 20) == pytest.approx(want, rel=1e-12)
    save_fits(tmp_path / "fit.json", [fit], [])
    assert main(["table", "--fit", str(tmp_path / "fit.json"), "--all"]) == 0
    assert "factors 1: ring-segmented, ring-bidirectional, hierarchical" in capsys.readouterr().out


def synthetic_fit(factors: dict[str, Factors]) -> Fit:
    return Fit(
        key={"machine": "synthetic", "backend": "cpu", "sync": "none"},
        shared=False,
        params=TRUE,
        interval={},
        gamma_source="synthetic",
        algorithms=["recursive-doubling", "ring"],
        nodes=[2, 4],
        sizes=[1024, 1 << 20],
        factors=factors,
    )


def test_auto_and_the_table_pick_what_the_factors_favour(tmp_path, monkeypatch):
    # At 1 KiB on 4 nodes α decides: the theory gives recursive doubling 2 steps and the ring
    # 6, but a recursive doubling that measured 4x its steps' cost takes 8.
    theory = synthetic_fit({})
    slow = synthetic_fit({"ring": Factors(), "recursive-doubling": Factors(4.0, 1.0)})
    assert {r[3] for r in decision_table(theory, nodes=(4,), sizes=(1024,))} == {
        "recursive-doubling"
    }
    assert {r[3] for r in decision_table(slow, nodes=(4,), sizes=(1024,))} == {"ring"}
    for fit, want in ((theory, "recursive-doubling"), (slow, "ring")):
        save_fits(tmp_path / "fit.json", [fit], [])
        monkeypatch.setenv(auto.FIT_ENV, str(tmp_path / "fit.json"))
        auto.reset()
        try:
            assert auto.choose("cpu", "allreduce", 4, 1024) == want
        finally:
            auto.reset()


def test_check_picks_judges_a_fit_by_the_runs_fixed_series(tmp_path, capsys):
    save_fits(tmp_path / "fit.json", [synthetic_fit({})], [])
    run = tmp_path / "run.csv"
    rows = [  # (algorithm, N, bytes, us): the fit picks recursive doubling at 1 KiB, N = 4
        ("recursive-doubling", 4, 1024, 30.0),
        ("ring", 4, 1024, 20.0),
        ("auto", 4, 1024, 5.0),  # auto's own series is not a fixed algorithm
        ("recursive-doubling", 4, 2048, 10.0),
        ("ring", 4, 2048, 10.5),
    ]
    run.write_text(
        "backend,algorithm,executor,buffers,nodes,bytes,time_us\n"
        + "".join(f"cpu,{a},nodes,,{n},{b},{t}\n" for a, n, b, t in rows)
    )
    assert main(["check-picks", "--fit", str(tmp_path / "fit.json"), str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[4:] == ["recursive-doubling", "30.0", "ring", "20.0", "1.50", ">", "1.1x"]
    assert out[2].split()[4:] == [
        "recursive-doubling",
        "10.0",
        "recursive-doubling",
        "10.0",
        "1.00",
    ]
    assert out[-1] == (
        "cpu N=4: the fit's pick within 1.1x of the fastest fixed algorithm at 1 of 2 sizes "
        "(worst 1.50x)"
    )


def test_check_picks_leaves_out_the_series_of_another_executor(tmp_path, capsys):
    """A run with --executor nodes,slices has each algorithm twice: the fit is judged on
    the thread-per-node series it prices, not on the other's times for the same name."""
    save_fits(tmp_path / "fit.json", [synthetic_fit({})], [])
    run = tmp_path / "run.csv"
    rows = [
        ("recursive-doubling", "nodes", 30.0),
        ("ring", "nodes", 20.0),
        (
            "recursive-doubling",
            "slices",
            9.0,
        ),  # written last: it would stand for recursive doubling if read
        ("ring", "slices", 8.0),
    ]
    run.write_text(
        "backend,algorithm,nodes,bytes,time_us,executor,buffers\n"
        + "".join(f"cpu,{a},4,1024,{t},{e},\n" for a, e, t in rows)
    )
    assert main(["check-picks", "--fit", str(tmp_path / "fit.json"), str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[4:] == ["recursive-doubling", "30.0", "ring", "20.0", "1.50", ">", "1.1x"]


def test_check_picks_refuses_a_run_without_the_fits_algorithms(tmp_path, capsys):
    save_fits(tmp_path / "fit.json", [synthetic_fit({})], [])
    run = tmp_path / "run.csv"
    run.write_text(
        "backend,algorithm,executor,buffers,nodes,bytes,time_us\nother,ring,,,4,1024,3.0\n"
    )
    assert main(["check-picks", "--fit", str(tmp_path / "fit.json"), str(run)]) == 2
    assert "no size of these runs" in capsys.readouterr().err


def test_mpi_calls_riding_the_preflight_are_not_fitted_and_are_picked(tmp_path):
    """An MPI direct or reduce-broadcast call of at most GATHERED_BYTES sends its buffer in
    the pre-flight exchange and nothing else: its rows are left out of the fit (with a
    note), and the table picks one of them there (reduce-broadcast, whose local work is
    the least, where the fit has it) whatever the α–β–γ terms say; above it, and on
    another backend, the terms decide."""
    from ring.model.data import load_groups
    from ring.mpi.agree import GATHERED_BYTES

    run = tmp_path / "run.csv"
    names = ("direct", "reduce-broadcast", "ring")
    rows = [(a, b, t) for a in names for b, t in ((1024, 5.0), (4096, 9.0))]
    run.write_text(
        "backend,sync,algorithm,executor,buffers,nodes,dtype,op,bytes,time_us\n"
        + "".join(f"mpi,none,{a},,host,4,float32,sum,{b},{t}\n" for a, b, t in rows)
    )
    (group,), notes = load_groups([run])
    assert sorted((p.algorithm, p.nbytes) for p in group.points) == [
        ("direct", 4096),
        ("reduce-broadcast", 4096),
        ("ring", 1024),
        ("ring", 4096),
    ]
    assert any("mpi reduce-broadcast and direct at <= 1024 B: not fitted" in n for n in notes)
    # The factors make direct the slower by far: only the pre-flight rule picks it.
    fit = synthetic_fit({"direct": Factors(50.0, 50.0)})
    fit.key["backend"] = "mpi"
    names = ["direct", "ring"]
    assert fastest(fit, names, 4, GATHERED_BYTES) == "direct"
    assert fastest(fit, names, 4, GATHERED_BYTES + 4) == "ring"
    assert fastest(fit, ["ring"], 4, 64) == "ring"  # only among the candidates
    assert fastest(fit, [*names, "reduce-broadcast"], 4, 64) == "reduce-broadcast"
    fit.key["backend"] = "cpu"
    assert fastest(fit, names, 4, GATHERED_BYTES) == "ring"
