"""Planning by measuring (ring/planning): a trial keeps the fastest of candidates with known
costs within its budget, and the wisdom file survives a restart, is ignored with one
warning when corrupt, unreadable or from another version or host, and is never left half
written; writers merge under a lock, plans the library cannot run are dropped, and every
error of the command line is one line."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ring.planning import cli, race, store
from ring.planning.race import Trial
from ring.planning.store import Wisdom, WisdomWarning


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
    assert len(trial.times[("direct", "slices")]) == race.REPEATS
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
    assert trial.times == {"a": [2.0] * race.REPEATS, "b": [1.0] * race.REPEATS}
    assert trial.spent == 100.0 + race.REPEATS * 3.0


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
    assert len(trial.times["workers"]) == race.REPEATS


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
    assert all(len(trial.times[c]) == race.REPEATS for c in "bcd")
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
    assert race.slices_apart(4, 1 << 30, caches) == 6
    assert race.slices_apart(2, 1 << 30, caches) == 3
    assert race.slices_apart(4, 64 << 20, caches) == 1
    assert race.slices_apart(4, 64 << 20, (1 << 20, 32 << 20)) == 4


# A shape's key as ring.mpi.planning makes it, and one of the cpu's.
KEY = "mpi|allreduce|2|float64|sum|10|(1048576, None, 0)"
CPU_KEY = "cpu|allreduce|2|<f8|sum|10|(None, None, 'pairwise')"


def _put(mine: Wisdom, key: str, costs: dict, backend: str = "mpi") -> None:
    mine.put(key, _run_trial(costs), backend, "allreduce")


def test_wisdom_survives_a_restart(tmp_path):
    path = tmp_path / "wisdom.json"
    first = Wisdom(path)
    _put(first, KEY, {("ring",): 3.0, ("direct",): 1.0})
    # The process's planning cost: each candidate's untimed first call, then direct three
    # times and ring once (dropped).
    assert race.planning_cost().calls == 2 + 1 + race.REPEATS
    again = Wisdom(path)
    assert again.get(KEY) == ("direct",)
    assert again.get(KEY.replace("|2|", "|4|")) is None
    assert again.plans[KEY]["backend"] == "mpi" and again.plans[KEY]["collective"] == "allreduce"


@pytest.mark.parametrize(
    "spoil",
    ["not json", "no plans", "other version", "other host", "schema a string", "nested deep"],
)
def test_unusable_wisdom_is_ignored_with_one_warning(tmp_path, spoil):
    path = tmp_path / "wisdom.json"
    _put(Wisdom(path), KEY, {("ring",): 1.0})
    document = json.loads(path.read_text())
    if spoil == "not json":
        path.write_text("{")
    elif spoil == "nested deep":  # past the parser's depth: a RecursionError, caught
        path.write_text('{"plans": ' + "[" * 100_000)
    else:
        if spoil == "no plans":
            del document["plans"]
        elif spoil == "other version":
            document["library"] = "0.0.1"
        elif spoil == "other host":
            document["host"] = "another machine, 96 cores"
        else:
            document["schema"] = str(document["schema"])
        path.write_text(json.dumps(document))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ignored = Wisdom(path)
    assert [w.category for w in caught] == [WisdomWarning]
    (said,) = caught
    assert str(path) in str(said.message) and "\n" not in str(said.message)
    if spoil == "schema a string":  # the string shown as one: not "schema 3 ... takes 3"
        assert f"schema '{store.SCHEMA}'" in str(said.message)
    assert ignored.plans == {} and ignored.problem == str(said.message)
    _put(ignored, KEY, {("direct",): 1.0})  # replaced on the next write
    assert Wisdom(path).get(KEY) == ("direct",)


def test_a_file_larger_than_any_wisdom_is_ignored_unread(tmp_path, monkeypatch):
    path = tmp_path / "wisdom.json"
    _put(Wisdom(path), KEY, {("ring",): 1.0})
    monkeypatch.setattr(store, "MAX_BYTES", path.stat().st_size - 1)
    with pytest.warns(WisdomWarning, match="larger than"):
        assert Wisdom(path).plans == {}


# A plan's fields as the library writes them, and one field spoiled each.
BAD_PLANS = {
    "an unknown algorithm": ("mpi", "allreduce", ["bogus"]),
    "no choice": ("mpi", "allreduce", []),
    "five elements": ("mpi", "allreduce", ["ring"] * 5),
    "not a list": ("mpi", "allreduce", "ring"),
    "an algorithm of no reduce_scatter": ("mpi", "reduce_scatter", ["recursive-doubling"]),
    "an unknown backend": ("tpu", "allreduce", ["ring"]),
    "an unknown collective": ("mpi", "broadcast", ["ring"]),
    "an unknown executor": ("cpu", "allreduce", ["ring", "fibres", False, None]),
    "inline not a bool": ("cpu", "allreduce", ["ring", "nodes", "yes", None]),
    "a negative tile": ("cpu", "allreduce", ["ring", "slices", False, -4096]),
    "a cpu choice of mpi's form": ("cpu", "allreduce", ["ring"]),
    "nested seconds": ("mpi", "allreduce", ["ring"], {"ring": [[[1.0]]]}),
}


def _with_plan(path: Path, key: str, fields: tuple) -> None:
    """Add a plan of ``fields`` (backend, collective, choice[, seconds]) to ``path``."""
    document = json.loads(path.read_text())
    backend, collective, choice, *seconds = fields
    plan = {"backend": backend, "collective": collective, "choice": choice}
    document["plans"][key] = plan | {"seconds": seconds[0] if seconds else {}}
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("bad", sorted(BAD_PLANS))
def test_a_plan_the_library_cannot_run_is_dropped_with_one_warning(tmp_path, bad):
    path = tmp_path / "wisdom.json"
    _put(Wisdom(path), KEY, {("direct",): 1.0})
    _put(Wisdom(path), CPU_KEY, {("ring", "slices", False, 1 << 16): 1.0}, backend="cpu")
    _with_plan(path, "theirs", BAD_PLANS[bad])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mine = Wisdom(path)
    (said,) = [str(w.message) for w in caught]
    assert "1 plan(s) dropped" in said and "theirs: " in said and "\n" not in said
    assert mine.get("theirs") is None and mine.dropped == [said.split("library's: ")[1]]
    assert mine.get(KEY) == ("direct",)
    assert mine.get(CPU_KEY) == ("ring", "slices", False, 1 << 16)


def test_every_plan_the_library_writes_passes_its_own_check():
    """The reference: each backend's choices as its planner makes them."""
    for algorithm in ("ring", "direct", "reduce-broadcast"):
        assert store.plan_problem({**_plan("mpi"), "choice": [algorithm]}) is None
        for executor in ("nodes", "slices"):
            for tile in (None, 4096):
                choice = [algorithm, executor, True, tile]
                assert store.plan_problem({**_plan("cpu"), "choice": choice}) is None


def _plan(backend: str) -> dict:
    return {"backend": backend, "collective": "allreduce", "seconds": {"ring": 1e-6}}


def test_two_processes_sharing_a_file_keep_each_others_plans(tmp_path):
    """Each writer merges its plan into the file as it is then: a writer that read the file
    before the other wrote does not drop the other's plan."""
    path = tmp_path / "wisdom.json"
    first, second = Wisdom(path), Wisdom(path)  # both read the file while it is empty
    _put(first, KEY, {("direct",): 1.0})
    _put(second, KEY.replace("|2|", "|4|"), {("ring",): 1.0})
    again = Wisdom(path)
    assert again.get(KEY) == ("direct",)
    assert again.get(KEY.replace("|2|", "|4|")) == ("ring",)
    assert second.get(KEY) == ("direct",)  # the writer holds what it merged
    assert sorted(p.name for p in tmp_path.iterdir()) == [".wisdom.json.lock", "wisdom.json"]


_WRITER = """
import sys
from ring.planning import cli, race, store
from ring.planning.race import Trial
from ring.planning.store import Wisdom

mine = Wisdom(store.wisdom_path())
for k in range(40):
    trial = Trial([("ring",)], 1.0)
    trial.record(("ring",), 1.0, run=1.0)
    mine.put(f"mpi|allreduce|{sys.argv[1]}|float64|sum|{k}|()", trial, "mpi", "allreduce")
"""


def test_concurrent_writers_lose_no_plan(tmp_path):
    path = tmp_path / "wisdom.json"
    env = {**os.environ, store.WISDOM_ENV: str(path)}
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(n)], env=env, stderr=subprocess.PIPE)
        for n in (2, 3)
    ]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    assert len(Wisdom(path).plans) == 80


def test_a_write_waits_for_the_lock_and_gives_up_in_one_warning(tmp_path, monkeypatch):
    """A lock another process holds past LOCK_SECONDS (one stopped mid-write): the write is
    given up, said in one warning, and planning goes on; the file is untouched."""
    path = tmp_path / "wisdom.json"
    _put(Wisdom(path), KEY, {("ring",): 1.0})
    before = path.read_text()
    monkeypatch.setattr(store, "LOCK_SECONDS", 0.05)
    held = os.open(tmp_path / ".wisdom.json.lock", os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # another open file: as another process's
        mine = Wisdom(path)
        with pytest.warns(WisdomWarning, match="wisdom not written .*lock was held"):
            _put(mine, KEY, {("direct",): 1.0})
        assert mine.get(KEY) == ("direct",)  # this process plans by it all the same
    finally:
        os.close(held)
    assert path.read_text() == before


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_the_file_mode_follows_the_umask(tmp_path, umask):
    path = tmp_path / "wisdom.json"
    before = os.umask(umask)
    try:
        _put(Wisdom(path), KEY, {("ring",): 1.0})
        _put(Wisdom(path), KEY, {("direct",): 1.0})  # a rewrite too
    finally:
        os.umask(before)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_wisdom_is_ignored_with_one_warning(tmp_path):
    path = tmp_path / "wisdom.json"
    _put(Wisdom(path), KEY, {("ring",): 1.0})
    path.chmod(0)
    with pytest.warns(WisdomWarning, match="wisdom ignored"):
        assert Wisdom(path).plans == {}


def test_an_unwritable_wisdom_file_warns_and_planning_goes_on(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    mine = Wisdom(blocked / "wisdom.json")  # its folder is a file: nothing can be written
    with pytest.warns(WisdomWarning, match="wisdom not written"):
        _put(mine, KEY, {("ring",): 1.0})
    assert mine.get(KEY) == ("ring",)


def _leftovers(folder: Path) -> list[str]:
    """The files of ``folder`` but the wisdom file and its lock: a partial write's."""
    return [p.name for p in folder.iterdir() if p.name not in ("wisdom.json", ".wisdom.json.lock")]


def test_an_interrupted_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "wisdom.json"
    _put(Wisdom(path), "old", {("ring",): 1.0})
    before = path.read_text()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(store.json, "dump", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _put(Wisdom(path), "new", {("direct",): 1.0})
    assert path.read_text() == before
    assert _leftovers(tmp_path) == []


def test_a_full_disk_mid_write_warns_and_leaves_the_old_file_alone(tmp_path, monkeypatch):
    path = tmp_path / "wisdom.json"
    _put(Wisdom(path), "old", {("ring",): 1.0})
    before = path.read_text()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.json, "dump", full)
    with pytest.warns(WisdomWarning, match="No space left"):
        _put(Wisdom(path), "new", {("direct",): 1.0})
    assert path.read_text() == before
    assert _leftovers(tmp_path) == []  # no partial file left


def test_the_wisdom_path_and_budget_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RING_WISDOM", str(tmp_path / "w.json"))
    assert store.wisdom_path() == tmp_path / "w.json"
    monkeypatch.setenv("RING_WISDOM", "off")
    assert store.wisdom_path() is None
    monkeypatch.delenv("RING_WISDOM")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert store.wisdom_path() == tmp_path / "ring" / "wisdom.json"
    monkeypatch.setenv("RING_PLAN_BUDGET", "0.25")
    assert race.budget_seconds() == 0.25
    monkeypatch.setenv("RING_PLAN_BUDGET", "soon")
    with pytest.raises(ValueError, match="RING_PLAN_BUDGET='soon'"):
        race.budget_seconds()


def test_the_command_line_shows_exports_imports_and_forgets(tmp_path, monkeypatch, capsys):
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("RING_WISDOM", str(path))
    _put(Wisdom(path), CPU_KEY, {("direct", "nodes", False, None): 1.0}, backend="cpu")
    assert cli.main(["show"]) == 0
    assert capsys.readouterr().out == f"{CPU_KEY}: direct/nodes/False/None\n"
    exported = tmp_path / "exported.json"
    assert cli.main(["export", str(exported)]) == 0
    assert cli.main(["forget"]) == 0
    assert not path.exists()
    assert cli.main(["import", str(exported)]) == 0
    assert Wisdom(path).get(CPU_KEY) == ("direct", "nodes", False, None)


def test_an_import_merges_into_the_plans_kept(tmp_path, monkeypatch):
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("RING_WISDOM", str(path))
    theirs = tmp_path / "theirs.json"
    _put(Wisdom(theirs), KEY, {("direct",): 1.0})
    _put(Wisdom(path), CPU_KEY, {("ring", "nodes", True, None): 1.0}, backend="cpu")
    assert cli.main(["import", str(theirs)]) == 0
    assert set(Wisdom(path).plans) == {KEY, CPU_KEY}


def _spoiled(path: Path, spoil: str) -> Path:
    """A wisdom file at ``path`` that cannot be imported here (``spoil``), or none."""
    if spoil == "missing":
        return path
    if spoil == "a folder":
        path.mkdir()
        return path
    _put(Wisdom(path), "theirs", {("ring",): 1.0})
    if spoil == "not json":
        path.write_text("{")
    elif spoil == "nested deep":
        path.write_text("[" * 100_000)
    elif spoil in BAD_PLANS:
        _with_plan(path, "bad", BAD_PLANS[spoil])
    else:
        document = json.loads(path.read_text())
        document["host"] = "another machine, 96 cores"
        path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    "spoil",
    ["missing", "a folder", "not json", "nested deep", "other host", *sorted(BAD_PLANS)[:4]],
)
def test_importing_what_cannot_be_used_fails_in_one_line_and_keeps_the_file(
    tmp_path, monkeypatch, capsys, spoil
):
    """A file holding one plan the library cannot run is not imported at all."""
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("RING_WISDOM", str(path))
    _put(Wisdom(path), "mine", {("direct",): 1.0})
    before = path.read_text()
    source = _spoiled(tmp_path / "theirs.json", spoil)
    assert cli.main(["import", str(source)]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and str(source) in said
    assert path.read_text() == before


def test_an_export_that_cannot_be_written_fails_in_one_line(tmp_path, monkeypatch, capsys):
    path = tmp_path / "wisdom.json"
    monkeypatch.setenv("RING_WISDOM", str(path))
    _put(Wisdom(path), "mine", {("direct",): 1.0})
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert cli.main(["export", str(blocked / "out.json")]) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "wisdom not written" in said


@pytest.mark.parametrize(
    ("argv", "code", "text"),
    [
        (["forget"], 1, "Is a directory"),  # RING_WISDOM names a folder
        (["show"], 1, "wisdom ignored"),
        (["export", "out.json"], 1, "wisdom ignored"),
        ([], 2, "usage: python -m ring.wisdom"),
        (["remember"], 2, "usage: python -m ring.wisdom"),
        (["export"], 2, "export takes one FILE"),
        (["show", "x"], 2, "show takes no FILE"),
    ],
)
def test_every_command_line_error_is_one_line(tmp_path, monkeypatch, capsys, argv, code, text):
    """``forget`` of a folder, and ``show`` or ``export`` of a file nested past the
    parser's depth, fail in one line each, as a command line it does not take does."""
    path = tmp_path / "wisdom.json"
    if argv == ["forget"]:
        path.mkdir()
    else:
        path.write_text("[" * 100_000)
    monkeypatch.setenv("RING_WISDOM", str(path))
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == code
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and text in captured.err, captured.err
    assert captured.out == ""


def test_candidates_within_noise_tie_and_the_first_in_order_is_the_plan(tmp_path):
    """Times one process cannot rank are a tie: the plan is the earlier candidate (the
    table's order), whichever timed a hair faster, and the wisdom says which tied."""
    trial = Trial([("ring",), ("direct",), ("rabenseifner",)], budget=1.0)
    for candidate, seconds in [(("ring",), 1.02), (("direct",), 1.0), (("rabenseifner",), 3.0)]:
        trial.warmed.add(candidate)
        trial.record(candidate, seconds)
    assert trial.tied() == [("ring",), ("direct",)]
    assert trial.winner() == ("ring",)
    mine = Wisdom(tmp_path / "wisdom.json")
    mine.put(KEY, trial, "mpi", "allreduce")
    plan = json.loads((tmp_path / "wisdom.json").read_text())["plans"][KEY]
    assert plan["choice"] == ["ring"] and plan["tied"] == ["direct"]
    assert Wisdom(tmp_path / "wisdom.json").get(KEY) == ("ring",)


def test_a_clear_winner_ties_with_none():
    trial = Trial([("ring",), ("direct",)], budget=1.0)
    for candidate, seconds in [(("ring",), 2.0), (("direct",), 1.0)]:
        trial.warmed.add(candidate)
        trial.record(candidate, seconds)
    assert trial.tied() == [("direct",)] and trial.winner() == ("direct",)
