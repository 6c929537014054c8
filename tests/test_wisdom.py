"""Planning by measuring (ring/wisdom.py): a trial keeps the fastest of candidates with known
costs within its budget, and the wisdom file survives a restart, is ignored with one
warning when corrupt, unreadable or from another version or host, and is never left half
written."""

from __future__ import annotations

import errno
import json
import os
import warnings
from pathlib import Path

import pytest

from ring import wisdom
from ring.wisdom import Trial, Wisdom, WisdomWarning


def _run_trial(costs: dict, budget: float = 100.0) -> Trial:
    """A trial over ``costs`` (candidate -> seconds per call) driven to its end."""
    trial = Trial(list(costs), budget)
    calls = 0
    while (candidate := trial.next()) is not None:
        trial.record(candidate, costs[candidate])
        calls += 1
        assert calls < 100
    return trial


def test_a_trial_keeps_the_fastest_candidate():
    costs = {("ring", "nodes"): 3.0, ("direct", "slices"): 1.0, ("ring", "slices"): 1.5}
    trial = _run_trial(costs)
    assert trial.winner() == ("direct", "slices")
    # Each is timed REPEATS times unless dropped (ring by nodes, 3x the best, after one).
    assert len(trial.times[("direct", "slices")]) == wisdom.REPEATS
    assert len(trial.times[("ring", "nodes")]) == 1


def test_each_candidates_first_call_is_not_timed():
    """A first call makes and binds the candidate's plan: charged to the budget, not timed,
    so a candidate slow only on its first call is not dropped for it."""
    calls: dict = {}

    def cost(candidate):
        calls[candidate] = calls.get(candidate, 0) + 1
        return 50.0 if calls[candidate] == 1 else {"a": 2.0, "b": 1.0}[candidate]

    trial = Trial(["a", "b"], 1000.0)
    while (candidate := trial.next()) is not None:
        trial.record(candidate, cost(candidate))
    assert trial.winner() == "b"
    assert trial.times == {"a": [2.0] * wisdom.REPEATS, "b": [1.0] * wisdom.REPEATS}
    assert trial.spent == 100.0 + wisdom.REPEATS * 3.0


def test_a_candidate_whose_floor_loses_to_a_timed_one_is_never_run():
    """A floor (the workers' round trip) is a time a candidate cannot beat: it waits for the
    candidates without one, and is not run where one of them is already faster."""
    costs = {"inline": 1.0, "other inline": 1.5, "workers": 0.5, "near workers": 1.1}
    floors = {"workers": 2.0, "near workers": 0.8}
    trial = Trial(list(costs), 100.0, floors)
    ran = []
    while (candidate := trial.next()) is not None:
        ran.append(candidate)
        trial.record(candidate, costs[candidate])
    assert "workers" not in ran  # faster than its floor says it can be: never reached
    # Tried only once both candidates without a floor had their untimed and a timed call.
    first = ran.index("near workers")
    assert ran[:first].count("inline") >= 2 and ran[:first].count("other inline") >= 2
    assert trial.winner() == "inline"


def test_a_floor_below_the_best_lets_its_candidate_win():
    costs = {"inline": 1.0, "workers": 0.5}
    trial = Trial(list(costs), 100.0, {"workers": 0.4})
    while (candidate := trial.next()) is not None:
        trial.record(candidate, costs[candidate])
    assert trial.winner() == "workers"
    assert len(trial.times["workers"]) == wisdom.REPEATS


def test_where_the_budget_ends_before_any_timed_call_the_first_runs_decide():
    """At 1 GiB one call is half the budget: the candidates' first calls are all there is,
    and their runs (their plan's making left out) pick the plan."""
    runs = {"first": 0.6, "second": 0.45, "third": 0.5}
    trial = Trial(list(runs), 1.0)
    ran = []
    while (candidate := trial.next()) is not None:
        ran.append(candidate)
        trial.record(candidate, runs[candidate] + 0.01, run=runs[candidate])
    assert ran == ["first", "second"]  # two run whatever they cost: 1.07 s, nothing timed
    assert trial.times == {}
    assert trial.winner() == "second"
    assert trial.scores() == {"first": 0.6, "second": 0.45}


def test_the_least_timed_call_counts_so_a_drift_falls_on_no_candidate():
    """Calls of a few µs get faster while a trial goes on (code and data warming): with
    the candidates' calls in turn, their medians take the middle of the drift and pick
    the one that ran later in each turn; their least calls are the warm ones."""
    drift = {"a": [3.3, 2.7, 1.6], "b": [2.9, 2.5, 2.1]}  # measured so, at 1 KiB
    trial = Trial(["a", "b"], 100.0)
    while (candidate := trial.next()) is not None:
        times = drift[candidate]
        taken = times.pop(0) if candidate in trial.warmed else 30.0
        trial.record(candidate, taken * 1e-6, run=taken * 1e-6)
    assert trial.scores() == {"a": pytest.approx(1.6e-6), "b": pytest.approx(2.1e-6)}
    assert trial.winner() == "a"


def test_a_timed_call_counts_over_a_first_run():
    trial = Trial(["a", "b"], 100.0)
    trial.record("a", 5.0, run=0.1)  # a first run that was quick
    trial.record("b", 1.0, run=1.0)
    trial.record("a", 2.0)
    trial.record("b", 1.0)
    assert trial.scores() == {"a": 2.0, "b": 1.0}
    assert trial.winner() == "b"


def test_a_candidate_far_slower_than_the_best_is_tried_once():
    costs = {"fast": 1.0, "slow": 10.0, "close": 1.2}
    trial = _run_trial(costs)
    assert len(trial.times["slow"]) == 1
    assert trial.winner() == "fast"


def test_a_trial_stops_before_a_call_that_would_end_past_its_budget():
    """The next call's time is guessed as its candidate's so far, else the fastest's."""
    trial = Trial(["a", "b", "c"], 2.0)
    trial.record("a", 0.7, run=0.6)
    trial.record("b", 0.6, run=0.5)
    assert trial.next() == "c"  # 1.3 s spent, and the fastest so far takes 0.5
    trial.record("c", 0.15, run=0.1)
    assert trial.next() is None  # a's next call would take 0.6 more: 2.05 s
    assert trial.spent <= trial.budget
    assert trial.winner() == "c"


def test_a_trial_of_timed_calls_stops_within_its_budget():
    costs = {"first": 0.6, "second": 0.5, "third": 0.1}
    trial = _run_trial(costs, budget=2.0)
    assert trial.spent <= 2.0
    assert "third" not in trial.times  # never reached within the budget
    assert trial.winner() == "first"  # the only one timed


def test_a_call_shared_by_candidates_times_each_of_them():
    """Where a trial's call runs several candidates on slices of it, each call times up to
    ``pieces`` of them, the untried first, and the budget guess is their mean."""
    costs = {"a": 3.0, "b": 1.0, "c": 1.4, "d": 1.2}
    trial = Trial(list(costs), 100.0, pieces=2)
    shares = []
    while share := trial.share():
        shares.append(share)
        trial.record_share({c: costs[c] for c in share}, sum(costs[c] for c in share) / 2)
        assert len(shares) < 20
    # Every candidate once, then the turns; the slices' order turns from call to call.
    assert shares[:2] == [["a", "b"], ["d", "c"]]
    assert trial.winner() == "b"
    assert len(trial.times["a"]) == 1  # 3x the best after one call: dropped
    assert all(len(trial.times[c]) == wisdom.REPEATS for c in "bcd")
    assert trial.next() is None
    assert trial.spent == pytest.approx(sum(sum(costs[c] for c in s) / 2 for s in shares))


def test_a_shared_call_is_not_started_past_the_budget():
    trial = Trial(["a", "b", "c", "d"], 2.0, pieces=2)
    trial.record_share({"a": 0.6, "b": 0.8}, 0.7)
    assert set(trial.share()) == {"c", "d"}  # untried: the fastest's time is the guess
    trial.record_share({"c": 0.5, "d": 0.9}, 0.7)
    assert trial.share() == []  # a and b next, their mean 0.7 more: 2.1 s
    assert trial.winner() == "c"


def test_a_slice_streams_from_memory_as_the_whole_call_does():
    """Every slice's data, on all nodes, holds at least twice the last-level cache."""
    caches = (1 << 20, 300 << 20)
    assert wisdom.slices_apart(4, 1 << 30, caches) == 6
    assert wisdom.slices_apart(2, 1 << 30, caches) == 3
    assert wisdom.slices_apart(4, 64 << 20, caches) == 1
    assert wisdom.slices_apart(4, 64 << 20, (1 << 20, 32 << 20)) == 4


def test_wisdom_survives_a_restart(tmp_path):
    path = tmp_path / "wisdom.json"
    first = Wisdom(path)
    first.put("cpu|allreduce|2|float64|sum|10|()", _run_trial({("ring",): 3.0, ("direct",): 1.0}))
    # The process's planning cost: each candidate's untimed first call, then direct three
    # times and ring once (dropped).
    assert wisdom.wisdom().calls == 2 + 1 + wisdom.REPEATS
    again = Wisdom(path)
    assert again.get("cpu|allreduce|2|float64|sum|10|()") == ("direct",)
    assert again.get("cpu|allreduce|4|float64|sum|10|()") is None


@pytest.mark.parametrize(
    "spoil",
    ["not json", "no plans", "other version", "other host", "plan without choice"],
)
def test_unusable_wisdom_is_ignored_with_one_warning(tmp_path, spoil):
    path = tmp_path / "wisdom.json"
    Wisdom(path).put("k", _run_trial({("ring",): 1.0}))
    document = json.loads(path.read_text())
    if spoil == "not json":
        path.write_text("{")
    else:
        if spoil == "no plans":
            del document["plans"]
        elif spoil == "other version":
            document["library"] = "0.0.1"
        elif spoil == "other host":
            document["host"] = "another machine, 96 cores"
        else:
            document["plans"]["k"] = {"seconds": {}}
        path.write_text(json.dumps(document))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ignored = Wisdom(path)
    assert [w.category for w in caught] == [WisdomWarning]
    assert str(path) in str(caught[0].message)
    assert ignored.plans == {}
    ignored.put("k", _run_trial({("direct",): 1.0}))  # replaced on the next write
    assert Wisdom(path).get("k") == ("direct",)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_wisdom_is_ignored_with_one_warning(tmp_path):
    path = tmp_path / "wisdom.json"
    Wisdom(path).put("k", _run_trial({("ring",): 1.0}))
    path.chmod(0)
    with pytest.warns(WisdomWarning, match="wisdom ignored"):
        assert Wisdom(path).plans == {}


def test_an_unwritable_wisdom_file_warns_and_planning_goes_on(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    mine = Wisdom(blocked / "wisdom.json")  # its folder is a file: nothing can be written
    with pytest.warns(WisdomWarning, match="wisdom not written"):
        mine.put("k", _run_trial({("ring",): 1.0}))
    assert mine.get("k") == ("ring",)


def test_an_interrupted_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "wisdom.json"
    Wisdom(path).put("old", _run_trial({("ring",): 1.0}))
    before = path.read_text()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(wisdom.json, "dump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Wisdom(path).put("new", _run_trial({("direct",): 1.0}))
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["wisdom.json"]


def test_a_full_disk_mid_write_warns_and_leaves_the_old_file_alone(tmp_path, monkeypatch):
    path = tmp_path / "wisdom.json"
    Wisdom(path).put("old", _run_trial({("ring",): 1.0}))
    before = path.read_text()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(wisdom.json, "dump", full)
    with pytest.warns(WisdomWarning, match="No space left"):
        Wisdom(path).put("new", _run_trial({("direct",): 1.0}))
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["wisdom.json"]  # no partial file left


def test_the_wisdom_path_and_budget_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RING_WISDOM", str(tmp_path / "w.json"))
    assert wisdom.wisdom_path() == tmp_path / "w.json"
    monkeypatch.setenv("RING_WISDOM", "off")
    assert wisdom.wisdom_path() is None
    monkeypatch.delenv("RING_WISDOM")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert wisdom.wisdom_path() == tmp_path / "ring" / "wisdom.json"
    monkeypatch.setenv("RING_PLAN_BUDGET", "0.25")
    assert wisdom.budget_seconds() == 0.25
    monkeypatch.setenv("RING_PLAN_BUDGET", "soon")
    with pytest.raises(ValueError, match="RING_PLAN_BUDGET='soon'"):
        wisdom.budget_seconds()


def test_the_command_line_shows_exports_imports_and_forgets(tmp_path, monkeypatch, capsys):
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("RING_WISDOM", str(path))
    Wisdom(path).put("cpu|allreduce|2|float64|sum|10|()", _run_trial({("direct", "nodes"): 1.0}))
    assert wisdom.main(["show"]) == 0
    assert capsys.readouterr().out == "cpu|allreduce|2|float64|sum|10|(): direct/nodes\n"
    exported = tmp_path / "exported.json"
    assert wisdom.main(["export", str(exported)]) == 0
    assert wisdom.main(["forget"]) == 0
    assert not path.exists()
    assert wisdom.main(["import", str(exported)]) == 0
    assert Wisdom(path).get("cpu|allreduce|2|float64|sum|10|()") == ("direct", "nodes")
    assert wisdom.main(["export"]) == 2


def _spoiled(path: Path, spoil: str) -> Path:
    """A wisdom file at ``path`` that cannot be imported here (``spoil``), or none."""
    if spoil == "missing":
        return path
    Wisdom(path).put("theirs", _run_trial({("ring",): 1.0}))
    if spoil == "not json":
        path.write_text("{")
    else:
        document = json.loads(path.read_text())
        document["host"] = "another machine, 96 cores"
        path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("spoil", ["missing", "not json", "other host"])
def test_importing_what_cannot_be_used_fails_in_one_line_and_keeps_the_file(
    tmp_path, monkeypatch, capsys, spoil
):
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("RING_WISDOM", str(path))
    Wisdom(path).put("mine", _run_trial({("direct",): 1.0}))
    before = path.read_text()
    source = _spoiled(tmp_path / "theirs.json", spoil)
    assert wisdom.main(["import", str(source)]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and str(source) in said
    assert path.read_text() == before


def test_an_export_that_cannot_be_written_fails(tmp_path, monkeypatch):
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("RING_WISDOM", str(path))
    Wisdom(path).put("mine", _run_trial({("direct",): 1.0}))
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.warns(WisdomWarning, match="wisdom not written"):
        assert wisdom.main(["export", str(blocked / "out.json")]) == 1
