"""ring.model's cpu regimes: rows run inline and rows run threaded fitted apart, each call
priced by the regime the communicator's rule puts it in; rows of another executor left out."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest

import ring.cpu.planned as ring_cpu
from ring.model import Params, predict_seconds
from ring.model.__main__ import main
from ring.model.costs import ModelInputError, backend_group_size, inline_moves
from ring.model.data import Group, Point, load_groups
from ring.model.fit import Fit, Host, fit_group
from ring.model.regimes import INLINE, ONE, THREADED, runs_inline
from ring.model.table import decision_table, load_fits, save_fits

LIMIT = 1 << 20
# Inline: no hand-over but one core does every node's moves and bytes, and each node's
# buffer costs its checks; threaded: the reverse.
INLINE_TRUTH = Params(alpha=4e-7, beta=1.2e-10, gamma=2.4e-10, per_node=5e-6)
THREADED_TRUTH = Params(alpha=4e-5, beta=3e-11, gamma=6e-11)
ALGORITHMS = ("ring", "recursive-doubling", "rabenseifner")


def two_regimes(noise: float = 0.01, seed: int = 5) -> Group:
    """Rows of a cpu sweep with inline_bytes = 1 MiB: each size priced by the regime the
    backend ran it in."""
    rng = np.random.default_rng(seed)
    key = {"machine": "synthetic", "backend": "cpu", "inline_bytes": str(LIMIT)}
    group = Group(key, shared=True)
    for algorithm in ALGORITHMS:
        for n in (2, 4, 8):
            for size in (1 << e for e in range(10, 28)):
                inline = size <= LIMIT
                truth = INLINE_TRUTH if inline else THREADED_TRUTH
                exact = predict_seconds(truth, algorithm, n, size, shared=True, inline=inline)
                seconds = exact * rng.lognormal(0, noise)
                group.points.append(Point(algorithm, n, size, seconds, inline=inline))
    return group


def test_the_rule_is_the_communicators():
    assert runs_inline(2, 1, LIMIT) and runs_inline(4, LIMIT, LIMIT)
    assert not runs_inline(4, LIMIT + 1, LIMIT)
    assert not runs_inline(1, 100, LIMIT)  # one node: nothing to run on threads either way
    assert not runs_inline(2, 0, LIMIT) and not runs_inline(2, 100, 0)


@pytest.mark.slow
def test_fit_recovers_both_regimes():
    fit = fit_group(two_regimes())
    assert [r.regime for r in fit.regimes()] == [THREADED, INLINE]
    assert fit.inline_bytes == LIMIT and fit.inline is not None
    for regime, truth in ((fit, THREADED_TRUTH), (fit.inline, INLINE_TRUTH)):
        for name in ("alpha", "beta", "gamma"):
            got, want = getattr(regime.params, name), getattr(truth, name)
            assert got == pytest.approx(want, rel=0.05), (regime.regime, name)
    assert fit.inline.sizes == [1 << e for e in range(10, 21)]
    assert fit.sizes == [1 << e for e in range(10, 28)]  # the whole group's
    # The held-out check is the whole group's, each size predicted by its own regime.
    assert {h.nbytes for h in fit.held_out} == set(fit.sizes[1::2]) and not fit.inline.held_out
    assert max(abs(h.error) for h in fit.held_out) < 0.05
    # One curve across the switch cannot follow it.
    merged = dataclasses.replace(
        two_regimes(), points=[dataclasses.replace(p, inline=False) for p in two_regimes().points]
    )
    assert max(abs(h.error) for h in fit_group(merged).held_out) > 0.25


def test_a_call_is_priced_by_the_regime_it_runs_in(tmp_path, capsys):
    fit = fit_group(two_regimes())
    for size, regime in ((LIMIT, fit.inline), (LIMIT + 4, fit)):
        inline = regime is fit.inline
        want = predict_seconds(regime.params, "ring", 4, size, shared=True, inline=inline)
        assert fit.predict("ring", 4, size) == pytest.approx(want, rel=1e-12)
    # Another inline_bytes moves the switch: 0 runs every call threaded.
    threaded = predict_seconds(fit.params, "ring", 4, 1024, shared=True)
    assert fit.predict("ring", 4, 1024, Host(inline_bytes=0)) == pytest.approx(threaded)
    # Saved and loaded, the regimes stay; the table and the CLI use them.
    save_fits(tmp_path / "fit.json", [fit], [])
    (again,) = load_fits(tmp_path / "fit.json")
    assert again.inline is not None and again.inline.params == fit.inline.params
    assert again.predict("ring", 4, 1024) == fit.predict("ring", 4, 1024)
    assert decision_table(again) == decision_table(fit)
    argv = ["predict", "--fit", str(tmp_path / "fit.json"), "--algorithm", "ring"]
    assert main([*argv, "--nodes", "4", "--bytes", "1KiB"]) == 0
    assert f"{fit.predict('ring', 4, 1024) * 1e6:.1f} us" in capsys.readouterr().out
    assert main([*argv, "--nodes", "4", "--bytes", "1KiB", "--inline-bytes", "0"]) == 0
    assert f"{threaded * 1e6:.1f} us" in capsys.readouterr().out


def test_a_fit_file_from_before_the_regimes_is_one_fit_at_every_size(tmp_path):
    fit = fit_group(two_regimes())
    document = fit.to_json()
    for key in ("regime", "inline_bytes", "inline"):
        del document[key]
    old = Fit.from_json(json.loads(json.dumps(document)))
    assert old.regime == ONE and old.inline is None and old.regimes() == [old]
    # Every size priced by the one set of parameters it has, as when it was written.
    want = predict_seconds(old.params, "ring", 4, 1024, shared=True)
    assert old.predict("ring", 4, 1024) == pytest.approx(want, rel=1e-12)


@pytest.mark.slow
def test_a_group_of_one_regime_is_one_fit():
    group = two_regimes()
    group.points = [p for p in group.points if p.inline]
    fit = fit_group(group)
    assert fit.regime == ONE and fit.inline is None


def _write(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_rows_of_another_executor_are_left_out(tmp_path):
    header = ["backend", "sync", "algorithm", "nodes", "dtype", "op", "bytes", "time_us"]
    header += ["inline_bytes", "inline", "executor", "buffers"]
    base = ["cpu", "pairwise", "ring", "2", "float32", "sum"]
    rows = [
        [*base, "4096", "30", "4194304", "1", "nodes", ""],
        [*base, "8192", "40", "4194304", "1", "nodes", ""],
        [*base, "16384", "50", "4194304", "1", "slices", ""],  # another way to run: not fitted
        [*base, "8388608", "900", "4194304", "0", "slices", ""],
    ]
    groups, notes = load_groups([_write(tmp_path / "run.csv", header, rows)])
    (group,) = groups
    assert [(p.nbytes, p.inline) for p in group.points] == [(4096, True), (8192, True)]
    assert any(n.startswith("executor=slices: not fitted") for n in notes)
    # A CSV without the columns (schema 1) is refused, naming the migration.
    plain = [r[:-2] for r in rows]
    with pytest.raises(ModelInputError, match=r"no column executor, buffers .*tidy CSV schema 2"):
        load_groups([_write(tmp_path / "old.csv", header[:-2], plain)])


def test_mpi_rows_on_shared_buffers_are_left_out(tmp_path):
    """The model prices messages between the ranks' own buffers: rows of a run with
    --buffers host,shared fit as the host rows alone, in the same group as a run of host
    buffers only."""
    header = ["backend", "sync", "algorithm", "executor", "nodes", "dtype", "op", "bytes"]
    header.append("time_us")
    base = ["mpi", "none", "ring", "", "2", "float32", "sum"]
    rows = [[*base, str(4096 << k), str(30 * 2**k)] for k in range(4)]
    kinds = ["host", "shared", "host", "shared"]
    mixed = [[*r, kind] for r, kind in zip(rows, kinds, strict=True)]
    groups, notes = load_groups([_write(tmp_path / "run.csv", [*header, "buffers"], mixed)])
    (group,) = groups
    assert [p.nbytes for p in group.points] == [4096, 16384]
    assert "buffers" not in group.key
    assert any(n.startswith("buffers=shared: not fitted") for n in notes)
    host = _write(tmp_path / "host.csv", [*header, "buffers"], [[*r, "host"] for r in rows[:2]])
    groups, _ = load_groups([host, tmp_path / "run.csv"])
    (group,) = groups  # one group: the host rows of both runs
    assert sorted(p.nbytes for p in group.points) == [4096, 4096, 8192, 16384]
    with pytest.raises(ModelInputError, match="no column buffers"):
        load_groups([_write(tmp_path / "old.csv", header, rows[:2])])  # schema 1


def test_auto_on_a_communicator_prices_its_own_inline_bytes(monkeypatch):
    """inline_bytes=0 runs every call on the threads: auto picks by the threaded regime,
    at sizes where the default threshold would have priced the inline one."""
    from ring import CpuCommunicator
    from ring.model import auto
    from ring.model.table import fastest

    auto.reset()
    fit, _ = auto.fit_for("cpu")
    names = auto.candidates(fit, "allreduce")
    sizes = [1 << e for e in range(10, 23)]
    own = [auto.choose("cpu", "allreduce", 4, s, inline_bytes=0) for s in sizes]
    assert own == [fastest(fit, names, 4, s, auto.local_host(0)) for s in sizes]
    default = [auto.choose("cpu", "allreduce", 4, s) for s in sizes]
    assert own != default  # the default fit's two regimes pick differently here
    planned = []
    plan_for = ring_cpu.plan_for
    monkeypatch.setattr(CpuCommunicator, "_wake_seconds", lambda self: 0.0)  # plans nothing
    monkeypatch.setattr(ring_cpu, "plan_for", lambda *a: planned.append(a[4]) or plan_for(*a))
    with CpuCommunicator(4, algorithm="auto", inline_bytes=0) as comm:
        comm.allreduce([np.ones(256, np.float32) for _ in range(4)])
    assert set(planned) == {own[0]}  # its first call runs the pick (planned, then compared)


@pytest.mark.parametrize("nodes", [2, 3, 4, 8])
def test_an_inline_call_counts_the_moves_of_its_plan(nodes):
    """Ring family by its own count: every node takes 2(N-1) moves a pass (two lanes for
    the bidirectional ring), one pass per block; recursive doubling at a power of two
    receives into scratch and adds it, two moves per step, log2(N) steps."""
    ring = 2 * (nodes - 1) * nodes
    assert inline_moves("ring", nodes, 1 << 20, 2, 1 << 20) == ring
    assert inline_moves("ring-bidirectional", nodes, 1 << 20, 2, 1 << 20) == 2 * ring
    assert inline_moves("ring-segmented", nodes, 1 << 20, 2, 1 << 18) == 4 * ring
    if nodes & (nodes - 1) == 0:
        steps = nodes.bit_length() - 1
        assert inline_moves("recursive-doubling", nodes, 1 << 20, 2, 1 << 20) == (2 * steps * nodes)
    params = Params(alpha=1e-6, beta=0.0, gamma=0.0, per_node=5e-6)
    want = 1e-6 * ring + 5e-6 * nodes
    got = predict_seconds(params, "ring", nodes, 1 << 20, shared=True, inline=True)
    assert got == pytest.approx(want, rel=1e-12)
    # Threaded, the same parameters price the critical path's steps and no per-node term.
    threaded = predict_seconds(params, "ring", nodes, 1 << 20, shared=True)
    assert threaded == pytest.approx(1e-6 * 2 * (nodes - 1), rel=1e-12)


def test_hierarchical_is_priced_with_the_groups_its_backend_forms():
    """The cpu backend groups 4 nodes in 2s (ring.schedule.default_group_size), MPI's ranks
    on one host are one group: a fit prices hierarchical as the backend runs it."""
    assert backend_group_size("cpu", 4) == 2 and backend_group_size("gpu", 9) == 3
    assert backend_group_size("mpi", 4) == 4
    fit = fit_group(two_regimes())
    size = 4 * LIMIT
    for backend, group in (("cpu", 2), ("mpi", 4)):
        fit.key["backend"] = backend
        want = predict_seconds(fit.params, "hierarchical", 4, size, shared=True, group_size=group)
        assert fit.predict("hierarchical", 4, size) == pytest.approx(want, rel=1e-12)
    # Two groups of two take fewer steps than one group of four.
    one = predict_seconds(fit.params, "hierarchical", 4, 1024, shared=True, group_size=4)
    two = predict_seconds(fit.params, "hierarchical", 4, 1024, shared=True, group_size=2)
    assert two < one


def test_the_report_gives_the_inline_regimes_cost_per_node(tmp_path):
    from ring.report.words.cost_model import cost_model
    from ring.report.words.fmt import format_number

    fit = fit_group(two_regimes())
    save_fits(tmp_path / "model_fit.json", [fit], [])
    section = cost_model([(fit, tmp_path / "model_fit.json")])
    (table,) = [t for t in section.tables if t.title.startswith("Fitted parameters")]
    assert table.header[-1] == "per node per call (µs)"
    threaded, inline = table.rows
    assert "inline" in inline[0] and threaded[-1] == "n/a"
    assert inline[-1].startswith(format_number(fit.inline.params.per_node * 1e6) + " [")
