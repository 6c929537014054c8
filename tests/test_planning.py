"""``algorithm="auto"`` plans by measuring on the cpu backend (ring/planning): the first
calls of a shape try the candidates the table leaves in, on every executor and inline or
on the threads, the fastest stays and reaches the wisdom file, a second process starts
tuned, a Ctrl-C mid-planning leaves no partial wisdom and a right next call, and
``planning="estimate"`` measures nothing.  The module function reaches the bound path."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from ctrl_c import let_children_see_sigint
from reference import check, random_inputs
from test_bench import bench, outside_mpirun, small_ceilings  # noqa: F401 - autouse fixtures

import ring
import ring.auto
from ring.cpu import CpuCommunicator
from ring.cpu.planning import FUSED, Planner
from ring.host import positions
from ring.planning import race, store

let_children_see_sigint()


@pytest.fixture
def fresh_wisdom(tmp_path, monkeypatch):
    """An empty wisdom file of this test's own."""
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv(store.WISDOM_ENV, str(path))
    store.forget_process()
    yield path
    store.forget_process()


def _table(monkeypatch, *names: str) -> None:
    """The decision table's candidates taken as ``names``, and no algorithm left unpriced."""
    monkeypatch.setattr(ring.auto, "ranked", lambda *a, **k: names)
    monkeypatch.setattr(ring.auto, "unpriced", lambda *a, **k: ())


def _plans(monkeypatch) -> list[tuple]:
    """What each call planned to run (``CpuCommunicator._plan_call``: steps, threads,
    executor, trial, tile), in call order."""
    planned: list[tuple] = []
    real = CpuCommunicator._plan_call

    def plan_call(self, call):
        planned.append(real(self, call))
        return planned[-1]

    monkeypatch.setattr(CpuCommunicator, "_plan_call", plan_call)
    return planned


def _plan_checked(comm, inputs: list) -> list:
    """Call ``comm`` on buffers reset to ``inputs`` until auto has planned, every result
    checked against the reference; returns the buffers."""
    buffers = [x.copy() for x in inputs]
    while comm.measuring("allreduce", buffers, "sum"):
        for b, x in zip(buffers, inputs, strict=True):
            b[...] = x
        comm.allreduce(buffers)
        for b in buffers:
            check(b, inputs, "sum")
    return buffers


def _slowed(monkeypatch, costs: dict[str, float]) -> list[tuple]:
    """Each trial call of algorithm A, bound or not, runs ``costs[A]`` seconds longer; returns
    what calls on new buffers planned to run (:func:`_plans`; a repeat runs bound)."""
    real_run, real_bind = CpuCommunicator._run, CpuCommunicator._bind

    def run(self, buffers, ufunc, steps, *how):
        time.sleep(costs.get(steps.algorithm, 0.0))
        return real_run(self, buffers, ufunc, steps, *how)

    def bind(self, call, steps, *how):
        bound = real_bind(self, call, steps, *how)
        if bound is None:
            return None
        cost, real = costs.get(steps.algorithm, 0.0), bound.run

        def slowed():
            time.sleep(cost)
            return real()

        return bound._replace(run=slowed)

    monkeypatch.setattr(CpuCommunicator, "_run", run)
    monkeypatch.setattr(CpuCommunicator, "_bind", bind)
    return _plans(monkeypatch)


def test_planning_keeps_the_fastest_candidate_and_every_call_is_right(fresh_wisdom, monkeypatch):
    _table(monkeypatch, "ring", "recursive-doubling", "direct")
    planned = _slowed(monkeypatch, {"ring": 0.02, "recursive-doubling": 0.0, "direct": 0.01})
    rng = np.random.default_rng(2)
    with CpuCommunicator(3, algorithm="auto", inline_bytes=0, executor="nodes") as comm:
        for _ in range(12):
            inputs = random_inputs(rng, 3, 1000, np.float64, "sum")
            buffers = [x.copy() for x in inputs]
            comm.allreduce(buffers)
            for b in buffers:
                check(b, inputs, "sum")
    (plan,) = store.Wisdom(fresh_wisdom).plans.values()
    assert plan["choice"] == ["recursive-doubling", "nodes", False, None]
    ran = [p[0].algorithm for p in planned]
    assert set(ran[:3]) == {"ring", "recursive-doubling", "direct"}  # each tried in turn
    assert ran[-3:] == ["recursive-doubling"] * 3  # then only the fastest


@pytest.fixture
def free_wake(monkeypatch):
    """The workers' round trip taken as free: no candidate on them is left out for it."""
    monkeypatch.setattr(CpuCommunicator, "_wake_seconds", lambda self: 0.0)


def test_the_candidates_cross_algorithms_executors_and_inline(fresh_wisdom, monkeypatch, free_wake):
    _table(monkeypatch, "direct", "ring")
    planned = _plans(monkeypatch)
    with CpuCommunicator(3, algorithm="auto") as comm:  # at N = 2 direct is the ring
        buffers = [np.ones(512) for _ in range(3)]
        for _ in range(30):
            comm.allreduce(buffers)
    seen = {(p[0].algorithm, p[2], p[1] == 1) for p in planned}
    assert {a for a, _, _ in seen} == {"direct", "ring", FUSED}
    assert {e for _, e, _ in seen} == {"nodes", "slices"}
    assert {i for _, _, i in seen} == {True, False}


@pytest.mark.parametrize("tile", [None, 1024], ids=["one tile", "several tiles"])
def test_by_nodes_on_the_calling_thread_is_left_to_its_twin_by_position_in_one_tile(
    fresh_wisdom, monkeypatch, tile
):
    """Where a buffer fits one tile, by position makes each operation once, as by nodes
    makes each move, with nothing around them: by nodes is not tried on the calling thread
    unless by position makes more operations (Rabenseifner at N = 3: 8 against 6).  Over
    several tiles both are tried; every call's result is right."""
    _table(monkeypatch, "ring", "rabenseifner")
    if tile is not None:
        monkeypatch.setattr(positions, "tile_bytes", lambda: tile)
    planned = _plans(monkeypatch)
    rng = np.random.default_rng(7)
    inputs = random_inputs(rng, 3, 1000, np.float64, "sum")  # 8,000 B: one default tile
    with CpuCommunicator(3, algorithm="auto", inline_bytes=1 << 20) as comm:
        _plan_checked(comm, inputs)
    inline = {(p[0].algorithm, p[2]) for p in planned if p[1] == 1}
    assert {("ring", "slices"), ("rabenseifner", "nodes"), ("rabenseifner", "slices")} <= inline
    assert (("ring", "nodes") in inline) == (tile is not None)


def test_an_explicit_executor_or_inline_threshold_is_not_planned_over(
    fresh_wisdom, monkeypatch, free_wake
):
    _table(monkeypatch, "direct", "ring")
    with CpuCommunicator(3, algorithm="auto", executor="slices", inline_bytes=0) as comm:
        for _ in range(20):
            comm.allreduce([np.ones(512) for _ in range(3)])
    (plan,) = store.Wisdom(fresh_wisdom).plans.values()
    assert {k.rsplit("/", 1)[0] for k in plan["seconds"]} == {
        "direct/slices/False",
        f"{FUSED}/slices/False",
        "ring/slices/False",
    }


def test_an_allreduce_on_the_workers_tries_the_fused_path_second(monkeypatch):
    """Reduce-broadcast by slices (each byte crosses memory twice) is a candidate of every
    allreduce on the workers, right after the estimate, whatever the table's rank of it; not
    of the other collectives, nor where the executor is given."""
    _table(monkeypatch, "ring", "direct", "hierarchical")
    planner = Planner(4, "pairwise", 1 << 20, lambda: 0.0)
    fused = (FUSED, "slices", False, None)
    found = planner.candidates("allreduce", 1 << 30, None, None)
    assert found[:3] == [
        (found[0][0], "nodes", False, None),
        fused,
        (found[0][0], "slices", False, None),
    ]
    assert fused not in planner.candidates("allreduce", 1 << 30, None, "nodes")
    assert all(c[0] != FUSED for c in planner.candidates("reduce_scatter", 1 << 30, None, None))


def test_workers_whose_round_trip_loses_to_an_inline_candidate_are_not_tried(
    fresh_wisdom, monkeypatch
):
    monkeypatch.setattr(CpuCommunicator, "_wake_seconds", lambda self: 10.0)
    planned = _plans(monkeypatch)
    rng = np.random.default_rng(5)
    with CpuCommunicator(3, algorithm="auto") as comm:
        buffers = _plan_checked(comm, random_inputs(rng, 3, 300, np.float32, "sum"))
        assert comm.planned("allreduce", buffers, "sum")[2] is True  # inline
    assert {p[1] for p in planned} == {1}


def test_a_candidates_timed_calls_on_the_same_buffers_run_bound(fresh_wisdom, monkeypatch):
    """What a trial times is what the plan will cost: its call bound to the buffers, made
    once per candidate (its untimed first call), not the full path every time."""
    _table(monkeypatch, "direct", "ring")
    binds, unbound = [], []
    real_bind, real_run = CpuCommunicator._bind, CpuCommunicator._run
    monkeypatch.setattr(
        CpuCommunicator, "_bind", lambda self, *a: binds.append(a[2]) or real_bind(self, *a)
    )
    monkeypatch.setattr(
        CpuCommunicator, "_run", lambda self, *a: unbound.append(1) or real_run(self, *a)
    )
    with CpuCommunicator(3, algorithm="auto", executor="nodes", inline_bytes=1 << 20) as comm:
        buffers = [np.ones(64) for _ in range(3)]
        while comm.measuring("allreduce", buffers, "sum"):
            comm.allreduce(buffers)
    # One binding per candidate, and none on the call that settles the plan (it runs the
    # winner's); no call took the full path.
    assert len(binds) == 2 and not unbound


@pytest.mark.parametrize("inline_bytes", [1 << 20, 0], ids=["inline", "on the workers"])
def test_candidates_that_make_the_same_moves_are_timed_once(
    fresh_wisdom, monkeypatch, inline_bytes
):
    """At N = 2 direct and hierarchical make the ring's moves: only the first is tried,
    whether the candidates are compared as the trial starts (on the calling thread) or
    as each first runs (on the workers, whose round trip may rule them out first)."""
    _table(monkeypatch, "ring", "direct", "hierarchical")
    planned = _plans(monkeypatch)
    rng = np.random.default_rng(8)
    options = {"executor": "nodes", "inline_bytes": inline_bytes}
    with CpuCommunicator(2, algorithm="auto", **options) as comm:
        buffers = _plan_checked(comm, random_inputs(rng, 2, 301, np.float64, "sum"))
        assert comm.planned("allreduce", buffers, "sum")[0] == "ring"
    assert {p[0].algorithm for p in planned} == {"ring"}
    (plan,) = store.Wisdom(fresh_wisdom).plans.values()
    assert [k.split("/")[0] for k in plan["seconds"]] == ["ring"]


def test_a_faster_trial_call_repeats_bound_without_the_full_path(fresh_wisdom, monkeypatch):
    """A trial's timed call on the buffers its candidate is bound to skips the checks and
    the planning: the first call of each candidate alone takes the full path."""
    _table(monkeypatch, "direct", "ring")
    with CpuCommunicator(3, algorithm="auto", executor="nodes", inline_bytes=1 << 20) as comm:
        full = []
        real = comm._plan_call
        monkeypatch.setattr(comm, "_plan_call", lambda call: full.append(1) or real(call))
        rng = np.random.default_rng(9)
        inputs = random_inputs(rng, 3, 211, np.float64, "sum")
        buffers = [x.copy() for x in inputs]
        calls = 0
        while calls == 0 or comm.measuring("allreduce", buffers, "sum"):
            for b, x in zip(buffers, inputs, strict=True):
                b[...] = x
            comm.allreduce(buffers)
            calls += 1
            for b in buffers:
                check(b, inputs, "sum")
    # Two candidates' first calls and the call that settles the plan took the full path;
    # each candidate's timed calls (one at least) did not.
    assert len(full) == 3 and calls >= 3 + 2


def test_a_candidates_first_call_on_checked_buffers_is_not_checked_again(fresh_wisdom, monkeypatch):
    """The buffers an earlier candidate was bound to are the buffers it checked: the next
    candidate's first call plans and binds without checking them again, and a buffer
    changed in between (made read-only) is refused before anything is written."""
    _table(monkeypatch, "direct", "ring")
    checked = []
    real = ring.cpu.checks.validate_buffers
    monkeypatch.setattr(ring.cpu.checks, "validate_buffers", lambda b: checked.append(1) or real(b))
    rng = np.random.default_rng(10)
    with CpuCommunicator(3, algorithm="auto", executor="nodes", inline_bytes=1 << 20) as comm:
        buffers = _plan_checked(comm, random_inputs(rng, 3, 211, np.float64, "sum"))
        assert len(checked) == 1  # the first call: the buffers were checked once
        buffers = [x.copy() for x in random_inputs(rng, 3, 97, np.float64, "sum")]
        comm.allreduce(buffers)  # the first candidate's first call
        while comm._trial_bound and (key := next(iter(comm._trying), None)) is not None:
            candidate = comm._trying[key].next()
            if (key, candidate) not in comm._trial_bound:
                break  # the next call is a new candidate's first
            comm.allreduce(buffers)
        before = [b.copy() for b in buffers]
        buffers[1].flags.writeable = False
        with pytest.raises(ValueError, match=r"buffers\[1\] is read-only"):
            comm.allreduce(buffers)
        for b, x in zip(buffers, before, strict=True):
            np.testing.assert_array_equal(b, x)


def test_the_call_that_settles_a_plan_on_other_buffers_binds_those(fresh_wisdom, monkeypatch):
    """A trial's last call on one set of buffers, then the next on another: the plan
    settles on the new buffers, bound to them, and both sets get right results after."""
    _table(monkeypatch, "direct", "ring")
    rng = np.random.default_rng(11)
    with CpuCommunicator(3, algorithm="auto", executor="nodes", inline_bytes=1 << 20) as comm:
        first = random_inputs(rng, 3, 157, np.float64, "sum")
        a = [x.copy() for x in first]
        comm.allreduce(a)
        while comm._trying and next(iter(comm._trying.values())).next() is not None:
            for b, x in zip(a, first, strict=True):
                b[...] = x
            comm.allreduce(a)
            for b in a:
                check(b, first, "sum")
        for _ in range(2):
            for inputs in (random_inputs(rng, 3, 157, np.float64, "sum"), first):
                buffers = a if inputs is first else [x.copy() for x in inputs]
                for b, x in zip(buffers, inputs, strict=True):
                    b[...] = x
                comm.allreduce(buffers)
                for b in buffers:
                    check(b, inputs, "sum")
        assert not comm._trying and not comm._trial_bound
        assert comm.planned("allreduce", a, "sum") is not None


def test_a_winner_by_slices_is_timed_again_with_larger_and_smaller_tiles(
    fresh_wisdom, monkeypatch, free_wake
):
    """The tile is measured as the executor is: the cache probe's size is where it starts."""
    monkeypatch.setattr("ring.host.positions.tile_bytes", lambda: 400)
    monkeypatch.setattr("ring.cpu.planning.MIN_TILE", 8)
    _table(monkeypatch, "reduce-broadcast", "ring")
    planned = _plans(monkeypatch)
    rng = np.random.default_rng(8)
    with CpuCommunicator(4, algorithm="auto", executor="slices", inline_bytes=0) as comm:
        inputs = random_inputs(rng, 4, 2001, np.float32, "sum")  # 8004 B: 21 tiles of 400
        best = comm.planned("allreduce", _plan_checked(comm, inputs), "sum")
    assert {p[4] for p in planned} == {None, 1600, 100}
    (plan,) = store.Wisdom(fresh_wisdom).plans.values()
    winner = f"{best[0]}/slices/False"
    assert {f"{winner}/None", f"{winner}/1600", f"{winner}/100"} <= set(plan["seconds"])
    assert plan["choice"] == list(best)


def test_refinement_tries_only_tiles_that_change_the_cut(monkeypatch):
    from ring.cpu.planning import Planner

    monkeypatch.setattr("ring.host.positions.tile_bytes", lambda: 64 << 10)
    trial = race.Trial([("ring", "slices", True, None), ("ring", "nodes", True, None)], 10.0)
    trial.record(("ring", "slices", True, None), 0.1)
    trial.record(("ring", "slices", True, None), 0.1)
    refined = Planner.refinement(trial, 1 << 20)
    assert refined is not None and refined.refining
    assert refined.candidates == [
        ("ring", "slices", True, None),
        ("ring", "slices", True, 256 << 10),
        ("ring", "slices", True, 16 << 10),
    ]
    assert refined.times == trial.times  # the winner is not timed again from scratch
    assert Planner.refinement(refined, 1 << 20) is None  # once
    assert Planner.refinement(trial, 60 << 10) is not None  # 16 KiB tiles cut it in 4
    assert Planner.refinement(trial, 16 << 10) is None  # one tile whatever the size
    spent = race.Trial([("ring", "slices", True, None)], 0.15)
    spent.record(("ring", "slices", True, None), 0.2)
    assert Planner.refinement(spent, 1 << 20) is None  # no budget left
    by_nodes = race.Trial([("ring", "nodes", True, None)], 10.0)
    by_nodes.record(("ring", "nodes", True, None), 0.1)
    assert Planner.refinement(by_nodes, 1 << 20) is None


def _runs(monkeypatch) -> list[int]:
    """The length of every plan run unbound (``CpuCommunicator._run``), in call order."""
    lengths: list[int] = []
    real = CpuCommunicator._run

    def run(self, buffers, *how):
        lengths.append(len(buffers[0]))
        return real(self, buffers, *how)

    monkeypatch.setattr(CpuCommunicator, "_run", run)
    return lengths


def test_a_large_allreduce_times_several_candidates_per_call_and_every_call_is_right(
    fresh_wisdom, monkeypatch
):
    """Where slices of a call stream from memory as the whole call does, a trial call runs
    one candidate per slice: the fastest still wins, and every result is right."""
    _table(monkeypatch, "ring", "recursive-doubling", "direct")
    monkeypatch.setattr(race, "slices_apart", lambda nodes, nbytes: 3)
    _slowed(monkeypatch, {"ring": 0.02, "recursive-doubling": 0.0, "direct": 0.01})
    lengths = _runs(monkeypatch)
    rng = np.random.default_rng(4)
    inputs = random_inputs(rng, 3, 1001, np.float64, "sum")
    with CpuCommunicator(3, algorithm="auto", inline_bytes=0, executor="nodes") as comm:
        _plan_checked(comm, inputs)
    (plan,) = store.Wisdom(fresh_wisdom).plans.values()
    assert plan["choice"] == ["recursive-doubling", "nodes", False, None]
    assert lengths[:3] == [334, 334, 333]  # the first call: three candidates, a slice each
    assert race.planning_cost().calls <= race.REPEATS + 1  # not a first and 3 timed calls each


@pytest.mark.parametrize(
    "op, dtype, count",
    [("avg", np.float32, 997), ("max", np.int32, 1024), ("prod", np.float64, 5), ("sum", bool, 64)],
)
def test_a_call_cut_into_slices_is_right_for_every_op(fresh_wisdom, monkeypatch, op, dtype, count):
    """Each slice divides by N for avg, reduces its own elements for the rest, on every
    executor; a buffer of fewer elements than slices runs whole."""
    monkeypatch.setattr(race, "slices_apart", lambda nodes, nbytes: 7)
    op = "bor" if dtype is bool and op == "sum" else op
    rng = np.random.default_rng(count)
    with CpuCommunicator(4, algorithm="auto") as comm:
        for _ in range(25):
            inputs = random_inputs(rng, 4, count, dtype, op)
            buffers = [x.copy() for x in inputs]
            comm.allreduce(buffers, op)
            for b in buffers:
                check(b, inputs, op)


def test_only_an_allreduce_is_cut_into_slices(fresh_wisdom, monkeypatch):
    """A reduce-scatter's or all-gather's chunks are of the whole buffer: never cut."""
    monkeypatch.setattr(race, "slices_apart", lambda nodes, nbytes: 3)
    shared: list[str] = []
    real = CpuCommunicator._try_share

    def try_share(self, call, *rest):
        shared.append(call.name)
        return real(self, call, *rest)

    monkeypatch.setattr(CpuCommunicator, "_try_share", try_share)
    rng = np.random.default_rng(6)
    inputs = random_inputs(rng, 3, 999, np.float64, "sum")
    with CpuCommunicator(3, algorithm="auto", inline_bytes=0) as comm:
        for _ in range(12):
            buffers = [x.copy() for x in inputs]
            comm.reduce_scatter(buffers)
            comm.all_gather(buffers)
            comm.allreduce(buffers)
    assert shared and set(shared) == {"allreduce"}


def test_estimate_planning_measures_nothing(fresh_wisdom, monkeypatch):
    planned = _slowed(monkeypatch, {})
    with CpuCommunicator(2, algorithm="auto", planning="estimate", inline_bytes=0) as comm:
        for _ in range(10):
            comm.allreduce([np.ones(64), np.ones(64)])
    assert not fresh_wisdom.exists()
    assert {p[0].algorithm for p in planned} == {ring.auto.choose("cpu", "allreduce", 2, 512, 0)}


@pytest.mark.parametrize("spoil", ["nested deep", "a bad plan"])
def test_auto_plans_on_over_a_wisdom_file_it_cannot_use(fresh_wisdom, spoil):
    """A file nested past the parser's depth, or a plan of this very shape naming no
    algorithm: one warning, and every call runs, planned by measuring, and right."""
    buffers = [np.arange(4096.0) + node for node in range(3)]
    if spoil == "nested deep":
        fresh_wisdom.write_text("[" * 100_000)
    else:
        key = race.shape_key(
            "cpu", "allreduce", 3, "<f8", "sum", 4096 * 8, (None, None, "pairwise")
        )
        plan = {
            "backend": "cpu",
            "collective": "allreduce",
            "choice": ["bogus", "nodes", True, None],
        }
        document = {**store.Wisdom.header(), "plans": {key: plan}}
        fresh_wisdom.write_text(json.dumps(document))
    expected = np.sum(buffers, axis=0)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", store.WisdomWarning)
        for _ in range(40):
            mine = [b.copy() for b in buffers]
            ring.allreduce(mine, algorithm="auto")
            assert all(np.array_equal(m, expected) for m in mine)
    assert len([w for w in said if issubclass(w.category, store.WisdomWarning)]) == 1
    assert race.planning_cost().calls > 0  # planned by measuring, not by the file


def test_planning_cost_is_counted(fresh_wisdom, monkeypatch):
    _table(monkeypatch, "direct", "ring")
    with CpuCommunicator(2, algorithm="auto", executor="nodes", inline_bytes=0) as comm:
        for _ in range(10):
            comm.allreduce([np.ones(64), np.ones(64)])
    mine = race.planning_cost()
    assert 0 < mine.calls <= 2 + 2 * race.REPEATS  # first calls untimed, then the turns
    assert mine.seconds > 0


_SECOND_PROCESS = """
import json, numpy as np
import ring
from ring.planning import race, store
buffers = [np.ones(4096) for _ in range(3)]
for _ in range(100):  # a trial: 12 candidates, a first call and 3 timed each
    ring.allreduce(buffers, algorithm="auto")
print(json.dumps({"calls": race.planning_cost().calls, "plans": store.wisdom().plans}))
"""


def _python(code: str, env: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_wisdom_survives_a_restart_so_the_second_process_starts_tuned(tmp_path):
    env = {**os.environ, store.WISDOM_ENV: str(tmp_path / "wisdom.json")}
    first = _python(_SECOND_PROCESS, env)
    assert first["calls"] > 0 and first["plans"]
    second = _python(_SECOND_PROCESS, env)
    assert second["calls"] == 0
    assert second["plans"] == first["plans"]


_INTERRUPTED = """
import numpy as np, sys
import ring
buffers = [np.ones(1 << 21) for _ in range(2)]
print("planning", flush=True)
while True:
    ring.allreduce(buffers, algorithm="auto")
"""


# A trial call cut into slices, one candidate each, as at 1 GiB.
_CUT = "import ring.planning.race as w; w.slices_apart = lambda nodes, nbytes: 3\n"


@pytest.mark.slow
@pytest.mark.parametrize("prelude", ["", _CUT], ids=["whole calls", "cut calls"])
def test_ctrl_c_mid_planning_leaves_no_partial_wisdom_and_a_right_next_call(tmp_path, prelude):
    path = tmp_path / "wisdom.json"
    env = {**os.environ, store.WISDOM_ENV: str(path), race.BUDGET_ENV: "30"}
    process = subprocess.Popen(
        [sys.executable, "-c", prelude + _INTERRUPTED], stdout=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout.readline() == "planning\n"
    time.sleep(0.5)  # inside the trial: a 30 s budget at 16 MiB a call
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) != 0
    assert not path.exists() or json.loads(path.read_text())["plans"] is not None
    # No partial file: the wisdom file and its lock, if the plan was written.
    assert {p.name for p in tmp_path.iterdir()} <= {"wisdom.json", ".wisdom.json.lock"}
    check_code = prelude + textwrap.dedent("""
        import json, numpy as np, ring
        rng = np.random.default_rng(0)
        inputs = [rng.uniform(0.5, 2, 1 << 21) for _ in range(2)]
        buffers = [x.copy() for x in inputs]
        ring.allreduce(buffers, algorithm="auto")
        print(json.dumps(bool(np.allclose(buffers[1], inputs[0] + inputs[1]))))
    """)
    assert _python(check_code, env) is True


def test_the_module_function_reaches_the_bound_path(monkeypatch):
    """Repeated ``ring.allreduce`` calls on the same buffers run the bound call, and bad
    input is still refused before anything is touched."""
    bound_runs = []
    buffers = [np.full(256, 1.5), np.full(256, 2.0)]
    ring.allreduce(buffers, algorithm="reduce-broadcast")
    real = CpuCommunicator._guarded

    def guarded(self, name, run, *args):
        bound_runs.append(not args)  # the bound call runs with no arguments
        return real(self, name, run, *args)

    monkeypatch.setattr(CpuCommunicator, "_guarded", guarded)
    for _ in range(3):
        for b, value in zip(buffers, (1.5, 2.0), strict=True):
            b[...] = value
        ring.allreduce(buffers, algorithm="reduce-broadcast")
        assert all((b == 3.5).all() for b in buffers)
    assert bound_runs == [True, True, True]
    with pytest.raises(ValueError):
        ring.allreduce([buffers[0], np.ones(3)], algorithm="reduce-broadcast")
    assert (buffers[0] == 3.5).all()


@pytest.mark.parametrize(
    ("option", "valid", "equal"),
    [("segment_bytes", 4096, 4096.0), ("inline_bytes", 0, 0.0), ("inline_bytes", 0, False)],
)
def test_a_repeated_module_call_refuses_an_equal_value_of_another_type(option, valid, equal):
    """The repeated calls' lookup finds equal options, and 4096.0 == 4096: a value the
    first call's checks refuse is refused after a valid equal one too, nothing touched."""
    buffers = [np.full(1000, 1.5), np.full(1000, 2.0)]
    ring.allreduce(buffers, algorithm="ring-segmented", **{option: valid})
    ring.allreduce(buffers, algorithm="ring-segmented", **{option: valid})
    with pytest.raises(TypeError, match=f"{option} must be an integer"):
        ring.allreduce(buffers, algorithm="ring-segmented", **{option: equal})
    assert all((b == 7.0).all() for b in buffers)
    ring.allreduce(buffers, algorithm="ring-segmented", **{option: np.int64(valid)})
    assert all((b == 14.0).all() for b in buffers)


def _script_line(name: str, args: list[str], pattern: str) -> re.Match:
    """The one line ``scripts/NAME ARGS`` prints, matched whole by ``pattern``."""
    script = Path(__file__).parents[1] / "scripts" / name
    done = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = re.fullmatch(pattern, done.stdout)
    assert found, done.stdout
    return found


def test_the_planning_cost_script_prints_planning_against_a_loop():
    """scripts/plan_cost.py: the medians of planning new shapes, and their share of 1,000
    calls of the plan."""
    found = _script_line(
        "plan_cost.py",
        ["--nodes", "3", "--bytes", "4096", "--shapes", "2"],
        r"N=3 4096 B: planning ([\d.]+) ms \(([\d.]+)-([\d.]+)\) in ([\d.]+) calls;"
        r" 1000 calls ([\d.]+) ms; planning is (\d+)% of them\n",
    )
    planning, low, high, calls, loop, share = map(float, found.groups())
    assert low <= planning <= high and calls >= 2 and loop > 0
    assert abs(share - 100 * planning / loop) < 1 + 100 * 0.01 / loop  # printed rounded


def test_the_module_call_script_prints_the_module_function_against_a_held_call():
    """scripts/module_call.py: the medians of ``ring.allreduce`` and of a held
    communicator's call on the plan both run, and the median of the rounds' ratios."""
    found = _script_line(
        "module_call.py",
        ["--nodes", "3", "--bytes", "100", "--rounds", "3", "--calls", "200"],
        r"N=3 100 B: ring.allreduce ([\d.]+) us, held ([\d.]+) us; ratio ([\d.]+)"
        r" \(([\d.]+)-([\d.]+)\); plan \('([\w-]+)', '(nodes|slices)', (True|False), .*\)\n",
    )
    module, held, ratio, low, high = map(float, found.groups()[:5])
    assert module > 0 and held > 0 and low <= ratio <= high
    assert found[6] in ring.schedule.algorithms_of("allreduce")


def test_the_harness_reports_the_planning_cost(tmp_path, fresh_wisdom):
    sweep = ["-b", "1K", "-e", "4K", "-f", "4", "-n", "8", "--nodes", "2", "--algorithm", "auto"]
    code, out = bench(tmp_path, *sweep)
    assert code == 0
    planning = json.loads(out.with_suffix(".json").read_text())["planning"]
    assert planning["calls"] > 0 and planning["seconds"] > 0
    assert planning["wisdom"] == str(fresh_wisdom)


def test_one_module_call_sets_no_default_of_the_next(fresh_wisdom):
    """``ring.allreduce`` calls share a communicator per sync; the options one call names
    are that call's, so a later call that names none plans by measuring, as the default is."""
    nodes = 7  # a ring no other test of this module makes: the estimating call makes it
    for _ in range(5):
        ring.allreduce([np.ones(64) for _ in range(nodes)], algorithm="auto", planning="estimate")
    assert race.planning_cost().calls == 0
    buffers = [np.arange(96.0) + i for i in range(nodes)]
    ring.allreduce(buffers, algorithm="auto")
    assert race.planning_cost().calls == 1
    np.testing.assert_array_equal(buffers[1], nodes * np.arange(96.0) + sum(range(nodes)))


def test_cached_communicators_of_other_defaults_are_others():
    direct = ring.get_communicator(3, algorithm="direct", executor="slices")
    plain = ring.get_communicator(3)
    assert plain is not direct
    assert (plain.algorithm, plain.executor) == ("ring", "nodes")
    assert (direct.algorithm, direct.executor) == ("direct", "slices")
    assert ring.get_communicator(3, algorithm="direct", executor="slices") is direct


def test_the_harness_times_auto_once_planned_over_what_no_flag_fixed(tmp_path, fresh_wisdom):
    """``--executor nodes,slices`` gives each fixed algorithm a series per executor and auto
    one series that measures among them; auto's planning calls run before its timed calls,
    so every auto row names its plan and the JSON counts the planning calls."""
    import csv

    code, out = bench(
        tmp_path, "-b", "1K", "-e", "64K", "-f", "8", "--nodes", "2", "-n", "5",
        "--algorithm", "auto,direct", "--executor", "nodes,slices",
    )  # fmt: skip
    assert code == 0
    rows = list(csv.DictReader(out.open()))
    series = {(r["algorithm"], r["executor"]) for r in rows}
    assert series == {("direct", "nodes"), ("direct", "slices"), ("auto", "nodes")}
    plans = json.loads(fresh_wisdom.read_text())["plans"]
    assert all(key.endswith("(None, None, 'pairwise')") for key in plans)
    for row in rows:
        if row["algorithm"] == "auto":
            assert row["resolved"] in ring.schedule.ALGORITHMS and row["wrong"] == "0"
    planning = json.loads(out.with_suffix(".json").read_text())["planning"]
    assert planning["calls"] >= 2 * len(plans)  # each candidate's first call, at least
