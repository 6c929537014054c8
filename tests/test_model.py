"""ring.model: coefficients, the fit, held-out check, decision table, CLI, input checks."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from ring.model import ALGORITHMS, ModelInputError, Params, coefficients, predict_seconds
from ring.model.__main__ import main
from ring.model.auto import DEFAULTS
from ring.model.costs import design_row
from ring.model.data import Group, Point, load_groups
from ring.model.fit import SIGMA_ABSENT, Fit, Host, fit_group, fit_points, held_out
from ring.model.joint import Settings
from ring.model.paper import busbw_GBps, load_links
from ring.model.table import decision_table, load_fits, save_fits

REFERENCE = Path(__file__).resolve().parents[1] / "results" / "reference" / "amd-epyc-2core"
TRUE = Params(alpha=7e-6, beta=2.5e-10, gamma=6e-11)


def textbook(algorithm: str, n: int, size: float, p: Params) -> float:
    """Thakur, Rabenseifner & Gropp (2005), written out again for powers of two."""
    k = math.log2(n)
    share = (n - 1) / n
    if algorithm == "ring":
        return 2 * (n - 1) * p.alpha + 2 * share * size * p.beta + share * size * p.gamma
    if algorithm == "recursive-doubling":
        return k * (p.alpha + size * p.beta + size * p.gamma)
    assert algorithm == "rabenseifner"
    return 2 * k * p.alpha + 2 * share * size * p.beta + share * size * p.gamma


def synthetic(
    algorithms,
    noise: float,
    seed: int = 1,
    shared: bool = False,
    cores: int = 0,
    truth: Params = TRUE,
) -> Group:
    """Points of ``truth`` for N = 2, 4, 8 on ``cores`` cores (0: nodes are not CPU workers)."""
    rng = np.random.default_rng(seed)
    group = Group({"machine": "synthetic", "backend": "x"}, shared, cores=cores)
    for algorithm in algorithms:
        for n in (2, 4, 8):
            per_core = n / cores if cores else 0.0
            for size in (1 << e for e in range(10, 28)):
                exact = predict_seconds(
                    truth, algorithm, n, size, shared=shared, nodes_per_core=per_core
                )
                seconds = exact * rng.lognormal(0, noise)
                group.points.append(Point(algorithm, n, size, seconds, per_core))
    return group


@pytest.mark.parametrize("algorithm", ["ring", "recursive-doubling", "rabenseifner"])
@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_coefficients_are_the_textbook_costs(algorithm, n):
    size = 3_000_017
    got = predict_seconds(TRUE, algorithm, n, size)
    assert got == pytest.approx(textbook(algorithm, n, size, TRUE), rel=1e-12)


def test_derived_coefficients():
    # Hierarchical with one group is the ring; in groups, the ring's bytes and fewer steps.
    assert coefficients("hierarchical", 8, 10, group_size=8).steps == 14 == 2 * (8 - 1)
    hier = coefficients("hierarchical", 32, 10, group_size=8)
    assert (hier.steps, hier.link, hier.reduce) == (2 * 7 + 2 * 3, 2 * 31 / 32, 31 / 32)
    assert coefficients("ring-segmented", 4, 5 << 20, segment_bytes=1 << 20).steps == 5 * 6
    bidir = coefficients("ring-bidirectional", 4, 1)
    assert (bidir.link, bidir.received) == (0.75, 1.5)
    assert coefficients("direct", 4, 1).steps == 2 * 3  # N - 1 messages each way a step
    # MPICH's non-power-of-two recursive doubling: two more steps around log2(p').
    rd = coefficients("recursive-doubling", 6, 1)
    assert (rd.steps, rd.link, rd.reduce) == (4, 4, 3)
    assert coefficients("ring", 1, 100) == (0, 0, 0, 0, None)
    # Reduce-broadcast: node 0 takes and reduces N - 1 vectors, then sends its result N - 1
    # times (its link's two directions one after the other); on a shared bus only the
    # totals count, and they are direct's.
    rb, direct = coefficients("reduce-broadcast", 4, 1), coefficients("direct", 4, 1)
    assert design_row(rb, 4, 1000, shared=False) == (2, 6000, 3000)
    # At N = 2 the ring's bytes cross the link at once both ways; reduce-broadcast's do not.
    ring2, rb2 = coefficients("ring", 2, 1), coefficients("reduce-broadcast", 2, 1)
    assert rb2.link == 2 * ring2.link
    assert design_row(rb, 4, 1000, shared=True)[1:] == design_row(direct, 4, 1000, shared=True)[1:]


@pytest.mark.parametrize("shared", [False, True])
def test_fit_recovers_parameters_from_several_algorithms(shared):
    group = synthetic(["ring", "recursive-doubling", "rabenseifner"], noise=0.02, shared=shared)
    group.points[5] = dataclasses.replace(group.points[5], seconds=group.points[5].seconds * 3)
    fit = fit_group(group)
    assert fit.gamma_source.startswith("fitted jointly")
    for got, want, name in zip(fit.params[:3], TRUE[:3], ("alpha", "beta", "gamma"), strict=True):
        assert got == pytest.approx(want, rel=0.05), name
        low, high = fit.interval[name]
        assert low <= got <= high


@pytest.mark.slow
@pytest.mark.parametrize("shared", [False, True])
def test_fit_recovers_sigma_from_oversubscribed_nodes(shared):
    # 4 cores: N = 2, 4 have a core each, N = 8 runs 2 per core and takes 1 + σ as long.
    truth = TRUE._replace(sigma=1.5)
    algorithms = ["ring", "recursive-doubling", "rabenseifner"]
    group = synthetic(algorithms, noise=0.02, shared=shared, cores=4, truth=truth)
    fit = fit_group(group)
    assert fit.sigma_source.startswith("fitted jointly") and fit.cores == 4
    for name in ("alpha", "beta", "gamma", "sigma"):
        got, want = getattr(fit.params, name), getattr(truth, name)
        assert got == pytest.approx(want, rel=0.05), name
        low, high = fit.interval[name]
        assert low <= got <= high, name
    assert max(abs(h.error) for h in fit.held_out) < 0.1
    # The fitted machine's cores by default; another machine's cores on request.
    at_eight = fit.predict("ring", 8, 1 << 20)
    assert at_eight == pytest.approx(
        (1 + fit.params.sigma) * fit.predict("ring", 8, 1 << 20, Host(cores=8)), rel=1e-12
    )


@pytest.mark.slow
def test_sigma_is_fixed_at_zero_without_both_kinds_of_rows():
    algorithms = ["ring", "recursive-doubling", "rabenseifner"]
    roomy = fit_group(synthetic(algorithms, noise=0.0, cores=8))
    assert roomy.params.sigma == 0 and roomy.interval["sigma"] == (0.0, 0.0)
    assert roomy.sigma_source.startswith("fixed at 0: no row has more nodes than cores")
    crowded = fit_group(synthetic(algorithms, noise=0.0, cores=1))
    assert crowded.params.sigma == 0 and "every row has more nodes" in crowded.sigma_source
    unknown = fit_group(synthetic(algorithms, noise=0.0))
    assert unknown.params.sigma == 0 and "not recorded" in unknown.sigma_source


@pytest.mark.slow
def test_fit_file_without_sigma_loads_as_sigma_zero():
    fit = fit_group(synthetic(["ring", "recursive-doubling"], noise=0.0, cores=2))
    old = json.loads(json.dumps(fit.to_json()))
    for name in ("sigma_source", "cores"):
        del old[name]
    del old["params"]["sigma"], old["interval"]["sigma"]
    again = Fit.from_json(old)
    assert again.params.sigma == 0 and again.params[:5] == fit.params[:5]
    assert again.sigma_source == SIGMA_ABSENT and again.cores == 0
    want = predict_seconds(fit.params._replace(sigma=0.0), "ring", 4, 4096)
    assert again.predict("ring", 4, 4096) == pytest.approx(want, rel=1e-12)
    (h200,) = load_fits(DEFAULTS / "nvidia-h200" / "model_fit.json")
    assert h200.params.sigma == 0 and h200.predict("ring", 4, 1 << 20) > 0


def test_ring_alone_takes_gamma_from_the_ceiling():
    group = synthetic(["ring"], noise=0.01)
    group.add_ceilings_GBps.append(3 / TRUE.gamma / 1e9)
    fit = fit_group(group)
    assert "add kernel ceiling" in fit.gamma_source and "cannot be told apart" in fit.gamma_source
    assert fit.params.gamma == pytest.approx(TRUE.gamma, rel=1e-12)
    assert fit.params.alpha == pytest.approx(TRUE.alpha, rel=0.05)
    assert fit.params.beta == pytest.approx(TRUE.beta, rel=0.05)


def test_ring_alone_without_ceiling_says_beta_carries_gamma():
    fit = fit_group(synthetic(["ring"], noise=0.0))
    assert fit.params.gamma == 0 and "includes" in fit.gamma_source
    assert fit.params.beta == pytest.approx(TRUE.beta + TRUE.gamma / 2, rel=1e-6)


def test_held_out_error_by_hand():
    # Trained on 1K, 4K, 16K exactly on the model; 2K and 8K measured 10 % slow, so the
    # prediction is 1/1.1 of the measurement: error -1/11 at both.
    p = Params(1e-5, 1e-9, 0.0)
    points = []
    for size in (1024, 2048, 4096, 8192, 16384):
        exact = 2 * p.alpha + 2 * (1 / 2) * size * p.beta
        points.append(Point("ring", 2, size, exact * (1.1 if size in (2048, 8192) else 1.0)))
    result = held_out(points, Settings(shared=False, gamma=0.0))
    assert [h.nbytes for h in result] == [2048, 8192]
    for h in result:
        assert h.error == pytest.approx(-1 / 11, rel=1e-6)
        assert h.predicted_s == pytest.approx(h.measured_s / 1.1, rel=1e-6)


def test_decision_table_picks_the_least_predicted_time():
    fit = fit_group(synthetic(["ring", "recursive-doubling", "rabenseifner"], noise=0.0))
    rows = decision_table(fit)
    assert {r[3] for r in rows} <= set(fit.algorithms)
    # Data that follows the theory: every algorithm's factors are 1.
    for factors in fit.factors.values():
        np.testing.assert_allclose(factors, (1.0, 1.0), rtol=1e-6)
    for n, low, high, pick in rows:
        for size in (low, high):
            times = {a: textbook(a, n, size, fit.params) for a in fit.algorithms}
            # Ring and Rabenseifner tie at large sizes: either is the least.
            assert times[pick] <= min(times.values()) * (1 + 1e-6)
    small, large = rows[0], [r for r in rows if r[0] == 8][-1]
    assert small[3] == "recursive-doubling" and large[3] in ("ring", "rabenseifner")
    assert len({r[3] for r in rows}) > 1


def test_predictions_check_their_inputs():
    for bad, message in [
        (("tree", 4, 10), "unknown algorithm"),
        (("ring", 0, 10), "nodes must be"),
        (("ring", 4, -1), "size must be"),
        (("ring", True, 1), "nodes must be"),
        (("ring", 4, 1.5), "size must be"),
    ]:
        with pytest.raises(ModelInputError, match=message):
            predict_seconds(TRUE, *bad)
    with pytest.raises(ModelInputError, match="no data"):
        fit_points([], Settings(shared=False))
    for params, per_core, message in [
        (TRUE._replace(sigma=-0.5), 2.0, "sigma must be finite and >= 0, got -0.5"),
        (TRUE._replace(sigma=math.nan), 2.0, "sigma must be finite"),
        (TRUE, -1.0, "nodes per core must be finite and >= 0, got -1.0"),
        (TRUE, math.inf, "nodes per core must be finite"),
        (TRUE, "2", "nodes per core must be a number"),
    ]:
        with pytest.raises(ModelInputError, match=message) as caught:
            predict_seconds(params, "ring", 4, 10, nodes_per_core=per_core)
        assert "\n" not in str(caught.value)
    fit = fit_group(synthetic(["ring"], noise=0.0, cores=2, truth=TRUE._replace(sigma=1.0)))
    for cores in (0, -2, 1.5, True):
        with pytest.raises(ModelInputError, match="cores must be a whole number >= 1"):
            fit.predict("ring", 4, 10, Host(cores))


def _write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    """A result CSV of these columns, with the ones every ring.bench row has (algorithm,
    executor, buffers) filled as the harness fills them where ``header`` leaves them out."""
    header, rows = list(header), [list(row) for row in rows]
    for column in ("algorithm", "executor", "buffers"):
        if column not in header:
            header.append(column)
            for row in rows:
                backend = row[0]
                row.append(
                    {
                        "algorithm": "ring" if backend in ("cpu", "mpi", "gpu") else backend,
                        "executor": "nodes" if backend == "cpu" else "",
                        "buffers": "host" if backend == "mpi" else "",
                    }[column]
                )
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_bad_csv_is_refused_in_one_line(tmp_path, capsys):
    missing = _write(tmp_path / "a.csv", ["backend", "nodes", "bytes"], [["cpu", "2", "8"]])
    with pytest.raises(ModelInputError, match="missing columns sync, dtype, op, time_us"):
        load_groups([missing])
    header = ["backend", "sync", "nodes", "dtype", "op", "bytes", "time_us"]
    with pytest.raises(ModelInputError, match="no rows"):
        load_groups([_write(tmp_path / "b.csv", header, [])])
    bad = _write(tmp_path / "c.csv", header, [["cpu", "x", "2", "f", "sum", "8", "fast"]])
    with pytest.raises(ModelInputError, match=r"c\.csv:2: time_us is 'fast'"):
        load_groups([bad])
    zero = _write(tmp_path / "d.csv", header, [["cpu", "x", "0", "f", "sum", "8", "5"]])
    with pytest.raises(ModelInputError, match="nodes is 0, must be >= 1"):
        load_groups([zero])
    negative = _write(tmp_path / "e.csv", header, [["cpu", "x", "2", "f", "sum", "-8", "5"]])
    with pytest.raises(ModelInputError, match=r"bytes is -8\.0, must be finite and >= 0"):
        load_groups([negative])
    with pytest.raises(ModelInputError, match="no CSV"):
        load_groups([])
    assert main(["fit", str(tmp_path / "none.csv")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no such file" in error


@pytest.mark.slow
def test_reference_sweeps_fit_and_report_held_out(tmp_path, capsys):
    out = tmp_path / "fit.json"
    csvs = [str(REFERENCE / "cpu_sweep.csv"), str(REFERENCE / "mpi_sweep.csv")]
    assert main(["fit", *csvs, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    print(printed)  # the held-out errors, for the record (-s); no threshold on real timings
    fits = load_fits(out)
    assert {f.key["backend"] for f in fits} == {"cpu", "mpi"}
    for fit in fits:
        assert "add kernel ceiling" in fit.gamma_source
        sizes = fit.sizes
        assert {h.nbytes for h in fit.held_out} == set(sizes[1::2])
        assert all(math.isfinite(h.error) for h in fit.held_out)
    assert "mpi-allreduce: not fitted" in printed and "numpy-direct: not fitted" in printed


def test_cli_predict_and_table_read_the_fit(tmp_path, capsys):
    fit = fit_group(synthetic(["ring", "recursive-doubling"], noise=0.0))
    path = tmp_path / "fit.json"
    save_fits(path, [fit], [])
    assert json.loads(path.read_text())["fits"][0]["params"]["alpha"] == fit.params.alpha
    argv = ["predict", "--fit", str(path), "--algorithm", "ring", "--nodes", "4"]
    assert main([*argv, "--bytes", "1MiB"]) == 0
    want = fit.predict("ring", 4, 1 << 20) * 1e6
    assert f"{want:.1f} us" in capsys.readouterr().out
    assert main([*argv, "--bytes", "-5"]) == 2
    assert "cannot parse size" in capsys.readouterr().err
    assert main(["table", "--fit", str(path)]) == 0
    table = capsys.readouterr().out
    assert "recursive-doubling" in table and "rabenseifner" not in table
    assert main(["table", "--fit", str(path), "--backend", "nope"]) == 2
    assert set(ALGORITHMS) >= {"ring", "hierarchical", "direct"}


LINKS = Path(__file__).resolve().parents[1] / "config" / "links.yaml"


def test_paper_busbw_is_the_ring_formula_on_published_links(capsys):
    links, published = load_links(LINKS)
    assert {"nvlink3", "nvlink4", "pcie4", "pcie5", "ib-hdr", "ib-ndr"} <= set(links)
    assert links["pcie4"].bandwidth_GBps == pytest.approx(16 * 16 / 8 * 128 / 130)
    link, n, size = links["nvlink4"], 8, 1 << 30
    seconds = textbook("ring", n, size, link.params)
    assert busbw_GBps(link, "ring", n, size) == pytest.approx(size / seconds / 1e9 * 2 * 7 / 8)
    assert len(published) >= 3 and all(entry["source"] for entry in published)
    assert main(["paper", "--links", str(LINKS)]) == 0
    text = capsys.readouterr().out
    assert text.count("  1024 ") == len(links) and text.count("source: ") == len(published)


def test_paper_compares_the_figure_it_is_given(tmp_path, capsys):
    document = yaml.safe_load(LINKS.read_text())
    document["published"] = [dict(document["published"][0], busbw_GBps=100.0, bytes="1G")]
    path = tmp_path / "links.yaml"
    path.write_text(yaml.safe_dump(document))
    links, _ = load_links(path)
    entry = document["published"][0]
    model = busbw_GBps(links[entry["link"]], entry["algorithm"], entry["nodes"], 1 << 30)
    assert main(["paper", "--links", str(path)]) == 0
    assert f"model error {(model / 100.0 - 1) * 100:+.0f} %" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["links"]["pcie4"].pop("source"), "links.pcie4: no source"),
        (lambda d: d["links"]["pcie4"].update(lanes=0), "lanes must be a number > 0"),
        (lambda d: d["links"]["pcie4"].update(device="tpu"), "device 'tpu' is not under"),
        (lambda d: d["published"][0].update(link="smoke"), "link 'smoke' is not under"),
    ],
)
def test_bad_links_file_is_refused(tmp_path, edit, message):
    document = yaml.safe_load(LINKS.read_text())
    edit(document)
    path = tmp_path / "links.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ModelInputError, match=message):
        load_links(path)


def _bus_group(truth, rng) -> Group:
    """The ring at N = 2 and 4 on a shared bus, 1 KiB to 128 MiB, timed by ``truth`` with
    1 % noise, and the add ceiling that fixes γ."""
    group = Group({"machine": "synthetic", "backend": "x"}, shared=True)
    for n in (2, 4):
        for size in (1 << e for e in range(10, 28)):
            exact = predict_seconds(truth, "ring", n, size, shared=True)
            group.points.append(Point("ring", n, size, exact * rng.lognormal(0, 0.01)))
    group.add_ceilings_GBps.append(3 / TRUE.gamma / 1e9)
    return group


def test_fit_finds_a_cache_knee():
    # Per-byte cost on the shared bus triples once N·n passes 32 MiB.
    truth = TRUE._replace(knee=32 << 20, beta_above=3 * TRUE.beta)
    fit = fit_group(_bus_group(truth, np.random.default_rng(3)))
    assert 32 << 20 <= fit.params.knee < 64 << 20
    assert fit.params.beta_above == pytest.approx(truth.beta_above, rel=0.05)
    assert fit.params.beta == pytest.approx(truth.beta, rel=0.05)
    assert max(abs(h.error) for h in fit.held_out) < 0.05
    again = Fit.from_json(json.loads(json.dumps(fit.to_json(), allow_nan=False)))
    assert again.params == fit.params and again.interval == fit.interval
    assert math.isinf(fit_group(synthetic(["ring"], noise=0.0)).params.knee)


def test_fit_finds_a_ramp_and_a_step_stays_a_step():
    # Per-byte cost on the shared bus triples over working sets from 8 to 64 MiB, linearly
    # in their logarithm (a cache whose hits fall off over a range of sizes).
    truth = TRUE._replace(knee=8 << 20, ramp=8.0, beta_above=3 * TRUE.beta)
    assert predict_seconds(truth, "ring", 2, 8 << 20, shared=True) < predict_seconds(
        truth._replace(ramp=1.0), "ring", 2, 8 << 20, shared=True
    )
    rng = np.random.default_rng(5)
    fit = fit_group(_bus_group(truth, rng))
    start, end = fit.params.knee, fit.params.knee * fit.params.ramp
    assert 4 << 20 <= start < 16 << 20 and 32 << 20 <= end < 128 << 20, (start, end)
    assert fit.params.beta_above == pytest.approx(truth.beta_above, rel=0.05)
    assert fit.params.beta == pytest.approx(truth.beta, rel=0.05)
    # Fitted on every other size, the ramp's ends fall between the training working sets
    # (4x apart), not on the true ones.
    assert max(abs(h.error) for h in fit.held_out) < 0.15
    document = json.loads(json.dumps(fit.to_json(), allow_nan=False))
    assert Fit.from_json(document).params == fit.params
    del document["params"]["ramp"]  # a fit file written before the ramp: a step
    assert Fit.from_json(document).params.ramp == 1.0
    # The step of the test above is found as a step.
    step = TRUE._replace(knee=32 << 20, beta_above=3 * TRUE.beta)
    assert fit_group(_bus_group(step, rng)).params.ramp == 1.0


def test_cores_without_an_environment_count_one_thread_for_an_inline_row(tmp_path):
    # The cpu backend ran the small call on the calling thread (inline=1): one thread on 2
    # cores says p = 0.5, which is 2 cores, not N / p = 8.
    header = ["backend", "sync", "nodes", "dtype", "op", "bytes", "time_us", "threads_per_core"]
    header.append("inline")
    rows = [["cpu", "pairwise", "4", "float32", "sum", "4096", "50", "0.5", "1"]]
    groups, _ = load_groups([_write(tmp_path / "run.csv", header, rows)])
    assert groups[0].cores == 2 and groups[0].points[0].nodes_per_core == 0.5


def test_rows_carry_nodes_per_core_and_the_runs_segment(tmp_path):
    header = ["backend", "sync", "nodes", "dtype", "op", "bytes", "time_us", "threads_per_core"]
    rows = [
        ["mpi", "none", "2", "float32", "sum", "4096", "20", ""],
        ["mpi", "none", "6", "float32", "sum", "4096", "90", ""],
        ["cpu", "pairwise", "4", "float32", "sum", "4096", "50", "1.5"],
    ]
    csv_path = _write(tmp_path / "run.csv", header, rows)
    caches = {"l2": 1 << 19, "last_level": 48 << 20}
    environment = {"cpu_model": "Test CPU", "cores": 4, "mpi_hosts": 2, "cache_bytes": caches}
    csv_path.with_suffix(".json").write_text(json.dumps({"environment": environment}))
    groups, _ = load_groups([csv_path])
    points = {(g.key["backend"], p.nodes): (g, p) for g in groups for p in g.points}
    # MPI rows: ranks on one host (N over 2 hosts, rounded up) over the host's 4 cores.
    assert points["mpi", 2][1].nodes_per_core == 1 / 4
    assert points["mpi", 6][1].nodes_per_core == 3 / 4
    assert points["cpu", 4][1].nodes_per_core == 1.5  # the row's own column
    # ring-segmented's block: the backend's default on that machine, LLC / 4N above L2.
    assert points["mpi", 2][1].segment_bytes == (48 << 20) // 8
    assert points["mpi", 6][1].segment_bytes == (48 << 20) // 24
    group = points["mpi", 2][0]
    assert (group.cores, group.caches) == (4, (1 << 19, 48 << 20))
    csv_path.with_suffix(".json").unlink()  # no environment: the cpu row's column still says
    groups, _ = load_groups([csv_path])
    cpu = next(g for g in groups if g.key["backend"] == "cpu")
    assert cpu.cores == 3 and cpu.points[0].nodes_per_core == 1.5  # round(4 / 1.5)
    assert {p.nodes_per_core for g in groups if g is not cpu for p in g.points} == {0.0}
    fit = dataclasses.replace(
        fit_group(synthetic(["ring"], noise=0.0)), caches=group.caches, cores=group.cores
    )
    own = fit.predict("ring-segmented", 2, 64 << 20)
    assert own == pytest.approx(
        predict_seconds(fit.params, "ring-segmented", 2, 64 << 20, segment_bytes=6 << 20)
    )
    other = fit.predict("ring-segmented", 2, 64 << 20, Host(caches=(1 << 20, 8 << 20)))
    assert other == pytest.approx(
        predict_seconds(fit.params, "ring-segmented", 2, 64 << 20, segment_bytes=1 << 20)
    )
