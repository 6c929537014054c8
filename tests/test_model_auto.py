"""``algorithm="auto"``: the fit it reads, its picks against the decision table, its runs on
the CPU backend and under mpirun (the same pick on every rank), and the committed default
fits (package data, refitted from the CSVs beside them)."""

from __future__ import annotations

import fnmatch
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from fakecuda import FakeCuda, fake_cupy
from reference import check, random_inputs
from test_bench import bench, outside_mpirun, small_ceilings  # noqa: F401 - autouse fixtures
from test_bench_algorithm import rows_of
from test_mpi import MPIRUN, json_lines, mpirun

import ring
import ring.auto
import ring.cpu
import ring.cpu.planned
import ring.gpu
import ring.gpu.communicator
from ring.auto import AutoTableError
from ring.cpu.planning import Planner
from ring.model import ALGORITHMS, Params, auto
from ring.model.__main__ import main
from ring.model.data import load_groups
from ring.model.decisions import decisions, write_decisions
from ring.model.efficiency import reference_algorithm
from ring.model.fit import SIGMA_ABSENT, Fit, Host, fit_group
from ring.model.joint import predict_point
from ring.model.regimes import INLINE
from ring.model.table import TABLE_SIZES, decision_table, fastest, load_fits, save_fits
from ring.schedule import algorithms_of, plan

ROOT = Path(__file__).resolve().parents[1]
# Small sizes pay the latency (recursive doubling: fewest steps), large ones the bytes.
PARAMS = Params(alpha=1e-5, beta=1e-10, gamma=1e-9)


def write_fit(
    path: Path, backend: str, algorithms: list[str], params: Params = PARAMS, cores: int = 0
) -> Path:
    fit = Fit(
        key={"machine": "synthetic", "backend": backend, "sync": "none"},
        shared=False,
        params=params,
        interval={},
        gamma_source="synthetic",
        algorithms=sorted(algorithms),
        nodes=[2, 4],
        sizes=[1024, 1 << 20],
        sigma_source="synthetic",
        cores=cores,
    )
    save_fits(path, [fit], [])
    return path


def table_of(fit_path: Path) -> Path:
    """The decision table the library reads for the fits in ``fit_path`` (written beside
    it, as ``python -m ring.model decisions FIT --out TABLE`` writes it)."""
    table = fit_path.with_suffix(".table.json")
    if fit_path.is_file():
        write_decisions(fit_path, table)
    return table


@pytest.fixture
def use_fit(monkeypatch):
    """The model reads the fit (``RING_MODEL_FIT``) and the library the decision table
    written from it (``RING_AUTO_TABLE``); None: the committed defaults of both."""

    def use(path: Path | None) -> None:
        if path is None:
            monkeypatch.delenv(auto.FIT_ENV, raising=False)
            monkeypatch.delenv(ring.auto.TABLE_ENV, raising=False)
        else:
            monkeypatch.setenv(auto.FIT_ENV, str(path))
            monkeypatch.setenv(ring.auto.TABLE_ENV, str(table_of(path)))
        auto.reset()
        ring.auto.reset()

    yield use
    auto.reset()
    ring.auto.reset()


@pytest.mark.parametrize("backend", ["cpu", "mpi", "gpu"])
def test_default_fit_auto_is_the_tables_pick(use_fit, backend):
    use_fit(None)
    fit, path = auto.fit_for(backend)
    assert Path(path).parent.parent == auto.DEFAULTS and fit.key["backend"] == backend
    rows = decision_table(fit, host=auto.local_host())  # auto predicts for this machine
    for nodes, low, high, pick in rows:
        for size in (s for s in TABLE_SIZES if low <= s <= high):
            assert auto.choose(backend, "allreduce", nodes, size) == pick
    named = {row[3] for row in rows}
    for nodes in (3, 5, 16):
        for size in (1, 1000, 3 << 20, 1 << 30):
            assert auto.choose(backend, "allreduce", nodes, size) in set(fit.algorithms)
    assert named <= set(fit.algorithms)


def test_auto_never_picks_an_algorithm_the_table_does_not_name(tmp_path, use_fit):
    use_fit(write_fit(tmp_path / "fit.json", "cpu", ["ring", "recursive-doubling"]))
    fit, _ = auto.fit_for("cpu")
    # Ranked over every algorithm's model, reduce-broadcast (two steps) would win somewhere...
    assert "reduce-broadcast" in {row[3] for row in decision_table(fit, list(ALGORITHMS))}
    named = {row[3] for row in decision_table(fit)}
    assert named == {"ring", "recursive-doubling"}
    picks = {
        auto.choose("cpu", collective, nodes, size)
        for collective in ("allreduce", "reduce_scatter", "all_gather")
        for nodes in range(2, 17)
        for size in (*TABLE_SIZES, 1, 24, 999, 5 << 30)
    }
    # ...but auto picks only what the table of the measured algorithms names.
    assert picks == named
    assert auto.choose("cpu", "reduce_scatter", 2, 8) == "ring"  # rd has no reduce-scatter


def test_auto_predicts_with_this_machines_nodes_per_core(tmp_path, use_fit, monkeypatch):
    # σ = 2: at N = 8 on 2 cores (4 per core) a call takes 1 + 2·3 = 7 times as long as on
    # 8 cores.  The fit was measured on 4 cores; auto must use the cores it runs on.
    params = PARAMS._replace(sigma=2.0)
    use_fit(write_fit(tmp_path / "fit.json", "cpu", ["ring", "direct"], params, cores=4))
    seen: list[tuple[int, float]] = []
    real = Fit.predict

    def spy(fit, algorithm, nodes, nbytes, host=None, **options):
        seconds = real(fit, algorithm, nodes, nbytes, host, **options)
        seen.append((host.cores, seconds))
        return seconds

    monkeypatch.setattr(Fit, "predict", spy)
    times = {}
    for cores in (2, 8):
        monkeypatch.setattr(auto, "local_cores", lambda cores=cores: cores)
        auto.reset()
        seen.clear()
        pick = auto.choose("cpu", "allreduce", 8, 1 << 20)
        assert {c for c, _ in seen} == {cores}
        times[cores] = (pick, sorted(t for _, t in seen))
    # The slow-down scales every algorithm's call alike, so the pick stays; the times do not.
    assert times[2][0] == times[8][0]
    np.testing.assert_allclose(times[2][1], [7 * t for t in times[8][1]], rtol=1e-12)


def record_plans(monkeypatch, backend) -> list[str]:
    """The algorithm of every plan ``backend`` (a module) asks for, in order."""
    ran: list[str] = []
    real = backend.plan_for
    monkeypatch.setattr(backend, "plan_for", lambda *a, **k: ran.append(a[4]) or real(*a, **k))
    return ran


def test_cpu_auto_runs_the_models_pick(tmp_path, use_fit, monkeypatch):
    """Without measuring (planning="estimate") a call runs the table's pick."""
    use_fit(write_fit(tmp_path / "fit.json", "cpu", ["ring", "recursive-doubling"]))
    ran = record_plans(monkeypatch, ring.cpu.planned)
    rng = np.random.default_rng(3)
    for count in (16, 1 << 19):
        buffers = [rng.standard_normal(count) for _ in range(3)]
        expected = np.sum(np.array(buffers, dtype=np.float64), axis=0)
        ring.allreduce(buffers, algorithm="auto", planning="estimate")
        for buf in buffers:
            np.testing.assert_allclose(buf, expected, rtol=1e-12, atol=1e-12)
    assert ran == ["recursive-doubling", "ring"]
    # The communicator's default algorithm may be auto too.
    with ring.cpu.CpuCommunicator(2, algorithm="auto", planning="estimate") as comm:
        buffers = [np.full(8, 1.5), np.full(8, 2.0)]
        comm.allreduce(buffers)
    assert ran[-1] == "recursive-doubling" and all((b == 3.5).all() for b in buffers)


def test_gpu_auto_runs_the_models_pick_on_the_simulator(tmp_path, use_fit, monkeypatch):
    use_fit(write_fit(tmp_path / "fit.json", "gpu", ["ring", "recursive-doubling"]))
    ran = record_plans(monkeypatch, ring.gpu.communicator)
    rng = np.random.default_rng(5)
    sim = FakeCuda(1, seed=2)
    with fake_cupy(sim):
        comm = ring.gpu.GpuCommunicator(3, algorithm="auto", shared_devices=True)
        for count in (5, 1 << 16):
            inputs = random_inputs(rng, 3, count, np.float64, "sum")
            buffers = [sim.to_device(x, comm.devices[i]) for i, x in enumerate(inputs)]
            comm.allreduce(buffers, "sum")
            for buf in buffers:
                check(sim.to_host(buf), inputs, "sum")
        comm.close()
    assert ran == ["recursive-doubling", "ring"]


def test_auto_is_looked_up_once_per_call_shape(tmp_path, use_fit):
    use_fit(write_fit(tmp_path / "fit.json", "cpu", ["ring", "direct"]))
    buffers = [np.ones(64), np.ones(64)]
    for _ in range(5):
        ring.allreduce(buffers, algorithm="auto", planning="estimate")
    info = ring.auto.choose.cache_info()
    # Looked up once: the repeats run bound to the buffers, or take the cached pick.
    assert info.misses == 1 and info.hits <= 4
    assert ring.auto.table_for.cache_info().misses == 1


def test_auto_input_is_checked_before_anything_moves(tmp_path, use_fit):
    buffers = [np.ones(8), np.ones(8)]
    with pytest.raises(ValueError, match="option 'group_size' is not one of algorithm 'auto'"):
        ring.allreduce(buffers, algorithm="auto", group_size=2)
    with pytest.raises(ValueError, match="resolve 'auto' first"):
        plan("allreduce", 2, 8, "auto")
    use_fit(tmp_path / "missing.json")
    with pytest.raises(AutoTableError, match=r"missing\.table\.json: no such decision table"):
        ring.allreduce(buffers, algorithm="auto")
    use_fit(write_fit(tmp_path / "mpi.json", "mpi", ["ring"]))
    with pytest.raises(AutoTableError, match="has no table for backend 'cpu'"):
        ring.allreduce(buffers, algorithm="auto")
    assert all((b == 1).all() for b in buffers)


def test_bench_measures_auto_and_records_its_pick(tmp_path, use_fit):
    use_fit(write_fit(tmp_path / "fit.json", "cpu", ["ring", "recursive-doubling"]))
    sweep = ["-b", "8", "-e", "512K", "-f", "16", "-n", "2", "-d", "float64", "--nodes", "2"]
    code, out = bench(tmp_path, *sweep, "--algorithm", "auto,ring")
    assert code == 0
    rows = rows_of(out)
    assert {r["algorithm"] for r in rows} == {"auto", "ring"}
    assert all(r["wrong"] == "0" for r in rows)
    # auto measured its candidates (ring.cpu.planning: the table's two, and those it never
    # priced) and says which one it settled on.
    for row in rows:
        if row["algorithm"] == "ring":
            assert row["resolved"] == ""
        else:
            assert row["resolved"] in ALGORITHMS
    planning = json.loads(out.with_suffix(".json").read_text())["planning"]
    assert planning["calls"] > 0


def test_a_table_does_not_rule_out_an_algorithm_it_never_priced(tmp_path, use_fit):
    """A table fitted before an algorithm existed (or on a sweep without it) cannot prune
    it: the planner tries it after the table's own candidates, for the collectives it has."""
    use_fit(write_fit(tmp_path / "fit.json", "cpu", ["ring"]))
    planner = Planner(4, "pairwise", 1 << 20, lambda: 0.0)
    for collective in ("allreduce", "reduce_scatter"):
        found = planner.candidates(collective, 1024, None, None)
        assert found[0][0] == "ring"  # the table's pick stays first
        assert {c[0] for c in found} == set(algorithms_of(collective))
        unpriced = ring.auto.unpriced("cpu", collective, algorithms_of(collective))
        assert unpriced == tuple(a for a in algorithms_of(collective) if a != "ring")
    assert "recursive-doubling" not in algorithms_of("reduce_scatter")
    use_fit(write_fit(tmp_path / "all.json", "cpu", list(ALGORITHMS)))
    assert ring.auto.unpriced("cpu", "allreduce", algorithms_of("allreduce")) == ()


def _default_dirs() -> list[Path]:
    return sorted(p.parent for p in auto.default_fit_files())


def test_defaults_cover_every_backend_and_ship_in_the_wheel():
    assert {f.key["backend"] for p in auto.default_fit_files() for f in load_fits(p)} >= {
        "cpu",
        "mpi",
        "gpu",
    }
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["ring.model"]
    for folder in _default_dirs():
        for path in folder.iterdir():
            name = path.relative_to(ROOT / "ring" / "model").as_posix()
            assert any(fnmatch.fnmatch(name, pattern) for pattern in package_data), name


@pytest.mark.slow
@pytest.mark.parametrize("folder", _default_dirs(), ids=lambda p: p.name)
def test_default_fit_refits_from_its_csvs(folder, monkeypatch):
    monkeypatch.chdir(ROOT)
    csvs = sorted(
        str(p.relative_to(ROOT))
        for p in folder.glob("*.csv")
        if not p.name.endswith(".samples.csv")
    )
    groups, _ = load_groups(csvs)
    by_key = {json.dumps(g.key, sort_keys=True): g for g in groups}
    committed = load_fits(folder / "model_fit.json")
    assert len(committed) == len(by_key)
    older = []
    for fit in committed:
        # The parameters are compared; the bootstrap (3/4 of a fit's time) does not move them.
        again = fit_group(by_key[json.dumps(fit.key, sort_keys=True)], draws=0)
        assert again.algorithms == fit.algorithms and again.sources == fit.sources
        if fit.sigma_source == SIGMA_ABSENT:
            # Written by the model before σ and the run's own ring-segmented block: where
            # neither applies the model is the same, else its parameters are of the older one.
            if again.params.sigma == 0 and "ring-segmented" not in fit.algorithms:
                np.testing.assert_allclose(again.params, fit.params, rtol=1e-6)
            else:
                older.append(" ".join(fit.key.values()))
            continue
        if [r.regime for r in again.regimes()] != [r.regime for r in fit.regimes()]:
            older.append(" ".join(fit.key.values()) + " (fitted before the cpu regimes)")
            continue
        if any(r.corrections is None for r in fit.regimes()):
            older.append(" ".join(fit.key.values()) + " (fitted before the measured corrections)")
            continue
        for new, old in zip(again.regimes(), fit.regimes(), strict=True):
            assert new.sigma_source == old.sigma_source
            np.testing.assert_allclose(new.params, old.params, rtol=1e-6)
            assert new.corrections is not None and old.corrections is not None
            assert new.corrections.keys() == old.corrections.keys()
            for algorithm, by_n in old.corrections.items():
                assert new.corrections[algorithm].keys() == by_n.keys()
                for nodes, sizes in by_n.items():
                    np.testing.assert_allclose(new.corrections[algorithm][nodes], sizes, rtol=1e-6)
        assert again.inline_bytes == fit.inline_bytes
    if older:
        pytest.fail(
            f"{folder.name}/model_fit.json predates the model's terms ({'; '.join(older)})"
            f": refit with python -m ring.model fit {' '.join(csvs)} --out "
            f"{folder.relative_to(ROOT)}/model_fit.json"
        )


@pytest.mark.parametrize("folder", _default_dirs(), ids=lambda p: p.name)
def test_default_fits_price_the_reference_algorithm_at_its_measured_time(folder, monkeypatch):
    """The reference algorithm keeps factors 1, so the joint parameters are its own: its
    rows, priced by each regime of the committed fit, come out at their measured times
    (median within 20 %).  Fitted on every row, a robust fit can let the others' free
    factors carry α towards 0 and price the ring's small inline calls far below their time."""
    monkeypatch.chdir(ROOT)
    csvs = [str(p) for p in folder.glob("*.csv") if not p.name.endswith(".samples.csv")]
    groups, _ = load_groups(csvs)
    by_key = {json.dumps(g.key, sort_keys=True): g for g in groups}
    for fit in load_fits(folder / "model_fit.json"):
        if len(fit.algorithms) < 2:
            continue  # one algorithm: no factors to fit
        points = by_key[json.dumps(fit.key, sort_keys=True)].points
        reference = reference_algorithm(fit.algorithms)
        for regime in fit.regimes():
            inline = regime.regime == INLINE
            ratios = [
                predict_point(regime.params, p, regime.shared, regime.factors, inline) / p.seconds
                for p in points
                if p.algorithm == reference and bool(p.inline) == inline
            ]
            assert ratios, (fit.key, regime.regime)
            assert 0.8 <= float(np.median(ratios)) <= 1.2, (fit.key, regime.regime)


def test_table_cli_shows_auto_and_its_switches(use_fit, capsys):
    use_fit(None)
    assert main(["table", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "auto on cpu:" in out and "auto switches" in out
    for nodes in (2, 4, 8):
        assert f"  N={nodes}:" in out


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="mpirun not found (apt-get install openmpi-bin)")
@pytest.mark.parametrize("nodes", [2, 3])
def test_auto_resolves_the_same_on_every_rank(tmp_path, nodes):
    pytest.importorskip("mpi4py", reason="mpi4py not installed (pip install '.[mpi]')")
    table_a = table_of(write_fit(tmp_path / "a.json", "mpi", ["ring", "recursive-doubling"]))
    table_b = table_of(write_fit(tmp_path / "b.json", "mpi", ["ring", "direct"]))
    code, out, err, _ = mpirun(nodes, "auto_ranks.py", str(table_a), str(table_b))
    assert code == 0, err
    (report,) = json_lines(out)
    assert report["nodes"] == nodes
    picks = {p for _, per_rank in report["picks"] for p in per_rank}
    assert picks == {"ring", "recursive-doubling"}
    for _, per_rank in report["picks"]:
        assert len(per_rank) == nodes and len(set(per_rank)) == 1
    assert [r[1] for r in report["runs"]] == ["recursive-doubling", "ring"]
    assert all(all(r[2]) for r in report["runs"])
    # Ranks that read different tables pick differently: every rank raises the same error.
    for kind, message, untouched in report["differ"]:
        assert kind == "ValueError" and "algorithms differ between ranks" in message
        assert untouched


def test_check_auto_compares_with_the_fastest_fixed_algorithm(tmp_path, capsys):
    path = tmp_path / "run.csv"
    rows = [
        ("auto", 2, 1024, 12.0, "ring"),
        ("ring", 2, 1024, 11.0, ""),
        ("direct", 2, 1024, 10.0, ""),
        ("auto", 2, 2048, 30.0, "direct"),
        ("ring", 2, 2048, 20.0, ""),
        ("direct", 2, 2048, 31.0, ""),
        ("numpy-direct", 2, 2048, 1.0, ""),  # a peer is not a fixed algorithm of the library
    ]
    path.write_text(
        "backend,algorithm,executor,buffers,nodes,bytes,time_us,resolved\n"
        + "".join(f"cpu,{a},nodes,,{n},{b},{t},{r}\n" for a, n, b, t, r in rows)
    )
    assert main(["check-auto", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:-2] == [
        "cpu",
        "2",
        "1",
        "KiB",
        "12.0",
        "ring",
        "direct",
        "10.0",
        "1.20",
        "1.09",
    ]
    assert out[2].split()[-7:] == ["direct", "ring", "20.0", "1.50", "0.97", ">", "1.1x"]
    assert out[-2] == "auto within 1.1x of the fastest fixed algorithm at 0 of 2 sizes"


def test_check_auto_judges_auto_against_every_executors_fixed_series(tmp_path, capsys):
    """auto chooses its executor, so a fixed algorithm run by slices is a series it must
    match; auto run with its executor given, and rows on shared buffers, are not."""
    path = tmp_path / "run.csv"
    rows = [  # algorithm, executor, buffers, microseconds
        ("auto", "nodes", "", 10.0),
        ("auto", "slices", "", 1.0),  # auto with its executor given: not the auto judged
        ("ring", "nodes", "", 12.0),
        ("ring", "slices", "", 8.0),
        ("direct", "nodes", "shared", 2.0),  # another kind of buffers: left out
    ]
    path.write_text(
        "backend,algorithm,executor,buffers,nodes,bytes,time_us,resolved\n"
        + "".join(f"cpu,{a},{e},{b},2,1024,{t},ring\n" for a, e, b, t in rows)
    )
    assert main(["check-auto", str(path)]) == 0
    line = capsys.readouterr().out.splitlines()[1].split()
    assert line[4:11] == ["10.0", "ring", "ring", "by", "slices", "8.0", "1.25"]


def test_check_auto_gives_each_ratio_an_interval_from_the_timed_calls(tmp_path, capsys):
    rng = np.random.default_rng(1)
    calls = {  # (algorithm, size): timed calls; auto resolves to direct everywhere
        ("auto", 1024): 10 + rng.random(40) * 0.2,  # as fast as the fastest: within
        ("direct", 1024): 10 + rng.random(40) * 0.2,
        ("ring", 1024): 30 + rng.random(40),
        ("auto", 2048): 20 + rng.random(40) * 0.2,  # twice the fastest, tightly: beyond
        ("direct", 2048): 20 + rng.random(40) * 0.2,
        ("ring", 2048): 10 + rng.random(40) * 0.2,
        ("auto", 4096): np.linspace(5.0, 17.0, 40),  # too spread to tell
        ("direct", 4096): 10 + rng.random(40) * 0.2,
        ("ring", 4096): 30 + rng.random(40),
    }
    path = tmp_path / "run.csv"
    path.write_text(
        "backend,sync,algorithm,executor,buffers,nodes,bytes,time_us,resolved\n"
        + "".join(
            f"cpu,pairwise,{a},nodes,,2,{b},{np.median(t)},{'direct' if a == 'auto' else ''}\n"
            for (a, b), t in calls.items()
        )
    )
    (tmp_path / "run.samples.csv").write_text(
        "backend,sync,algorithm,nodes,dtype,op,bytes,call,time_us\n"
        + "".join(
            f"cpu,pairwise,{a},2,float32,sum,{b},{i},{t}\n"
            for (a, b), times in calls.items()
            for i, t in enumerate(times)
        )
    )
    assert main(["check-auto", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    low, high = (float(x) for x in out[1].split()[-2].split("-"))
    assert low <= 1.0 <= high <= 1.1 and not out[1].endswith(("?", "1.1x"))
    assert out[2].endswith("> 1.1x") and float(out[2].split()[-4].split("-")[0]) > 1.9
    assert out[3].endswith("?")
    assert "within 1.1x at 1, beyond it at 1 (>), the run cannot tell at 1 (?)" in out[-2]


@pytest.mark.slow  # every table written again from its fit (tests/tiers.py)
@pytest.mark.parametrize("folder", _default_dirs(), ids=lambda p: p.name)
def test_committed_decision_tables_are_written_from_the_default_fits(folder):
    """The library's tables are derived data: written again from the committed fits they
    are the committed files (python -m ring.model decisions --defaults writes them)."""
    table = ring.auto.DECISIONS / f"{folder.name}.json"
    assert json.loads(table.read_text()) == decisions(load_fits(folder / "model_fit.json"))
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["ring"]
    assert any(fnmatch.fnmatch(f"decisions/{table.name}", p) for p in package_data)


def test_the_librarys_pick_is_the_models_at_every_tabulated_shape(tmp_path, use_fit):
    path = write_fit(tmp_path / "fit.json", "cpu", ["ring", "recursive-doubling", "direct"])
    use_fit(path)
    (fit,) = load_fits(path)
    for collective in ("allreduce", "reduce_scatter", "all_gather"):
        names = auto.candidates(fit, collective)
        for nodes in (2, 3, 5, 8, 16):
            for log2 in range(0, 31, 3):
                size = 1 << log2
                for inline in (0, 1 << 40):
                    want = fastest(fit, names, nodes, size, Host(inline_bytes=inline))
                    assert ring.auto.choose("cpu", collective, nodes, size, inline) == want
    # Between tabulated sizes and N, the next one up decides.
    assert ring.auto.choose("cpu", "allreduce", 7, 3000, 0) == ring.auto.choose(
        "cpu", "allreduce", 7, 4096, 0
    )
    assert ring.auto.choose("cpu", "allreduce", 20, 4096, 0) == ring.auto.choose(
        "cpu", "allreduce", 32, 4096, 0
    )
