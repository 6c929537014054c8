"""Planning by measuring: the first calls of a call shape try the candidates, the fastest
stays, and a wisdom file keeps it for the next process.

What FFTW's planner (``FFTW_MEASURE`` and its wisdom files) and cuDNN's benchmark mode do,
for collectives: ``algorithm="auto"`` on a new *call shape* (backend, collective, N, dtype,
op, the next power of two of the bytes per node, and the options the caller fixed) runs its
first calls by the candidates the decision table ranks, and those it never priced
(:mod:`ring.auto`: the model prunes, the measurement decides), each timed on the caller's
own call, so trying costs no extra work and every call's result is right whichever candidate
ran it.  The candidates take turns: each's first call makes and binds its plan and is not
timed, then up to ``REPEATS`` timed calls each (the least counts, :meth:`Trial.scores`); one
whose least is more than ``DROP`` times the best so far is not tried again, nor one whose
measured floor (a planner's: the cpu's round trip of its worker threads) is above the best.
Once every candidate is timed, or the next call would end past the shape's budget
(``RING_PLAN_BUDGET`` seconds, default 1; the call's time guessed as its candidate's so far,
else the fastest's; two candidates run whatever it costs), the fastest candidate is the
shape's plan: by its least timed call, or by its first call's run where the budget ended
before timing it.  Where a planner lets a call run several candidates (:attr:`Trial.pieces`:
the cpu's and mpi's cut a large allreduce into slices, each by another candidate,
:func:`slices_apart`), each call times each of them once.

The plans are kept in a JSON wisdom file, ``$XDG_CACHE_HOME/ring/wisdom.json`` (default
``~/.cache/ring/wisdom.json``); ``RING_WISDOM`` names another, and ``RING_WISDOM=off``
keeps plans in memory only.  A file is written whole and renamed into place, so an
interrupted write leaves the old one, with the mode the umask gives a new file.  A write
merges: under a lock on ``.NAME.lock`` beside the file, it adds its plan to what the file
holds then, so processes sharing one file keep each other's plans.  The file names the
host (:func:`ring.machine.host_label`) and the library's version: a file from another host
or version, or one that cannot be read or parsed (larger than ``MAX_BYTES``, nested past
the parser's depth), is ignored with one warning and replaced on the next write.  Every
plan is checked against the library's algorithms and executors as it is read
(:func:`plan_problem`): one it cannot run is dropped, all of them said in one warning.
``python -m ring.wisdom show|export FILE|import FILE|forget`` manages it; every error is one
line: an import of a file it cannot use here, or that holds a plan it cannot run, fails
(exit 1) and imports nothing, as does an export it cannot write.
"""

from __future__ import annotations

import errno
import json
import math
import os
import reprlib
import secrets
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from ._version import __version__
from .machine import cache_bytes, host_label
from .schedule import COLLECTIVES, EXECUTORS, algorithms_of

try:
    import fcntl
except ImportError:  # no flock (Windows): a write still replaces the file whole
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "BUDGET_ENV",
    "DROP",
    "LOCK_SECONDS",
    "MAX_BYTES",
    "PLANNING",
    "REPEATS",
    "TOP",
    "WISDOM_ENV",
    "PlanningCost",
    "Trial",
    "Wisdom",
    "WisdomWarning",
    "budget_seconds",
    "check_planning",
    "forget_process",
    "generation",
    "plan_problem",
    "planning_cost",
    "shape_key",
    "slices_apart",
    "spend",
    "wisdom",
    "wisdom_path",
]

WISDOM_ENV = "RING_WISDOM"
BUDGET_ENV = "RING_PLAN_BUDGET"
SCHEMA = 3
# A wisdom file larger than this is not one (a plan is a few hundred bytes).
MAX_BYTES = 16 << 20
# How long a write waits for another process's hold of the file's lock before giving up.
LOCK_SECONDS = 10.0
REPEATS = 3
DROP = 2.0
# "measure": plan by measuring (this module); "estimate": the decision table's pick only.
PLANNING = ("measure", "estimate")
# The table's candidates a shape tries (the model prunes: its first few).
TOP = 3


def check_planning(planning: object) -> str:
    if not isinstance(planning, str) or planning not in PLANNING:
        raise ValueError(f"unknown planning {planning!r}: expected one of {', '.join(PLANNING)}")
    return planning


class WisdomWarning(UserWarning):
    """A wisdom file that could not be used: the plans are measured again."""


def wisdom_path() -> Path | None:
    """Where plans are kept (None: ``RING_WISDOM=off``, in memory only)."""
    chosen = os.environ.get(WISDOM_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "none") else Path(chosen)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "ring" / "wisdom.json"


def budget_seconds() -> float:
    """The planning budget per call shape (``RING_PLAN_BUDGET``, default 1 s)."""
    text = os.environ.get(BUDGET_ENV, "1")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{BUDGET_ENV}={text!r}: give the seconds a new call shape may plan")
    return value


def slices_apart(nodes: int, nbytes: int, caches: tuple[int, int] | None = None) -> int:
    """Into how many slices a trial may cut an allreduce of ``nbytes`` per node, each run
    by another candidate (:attr:`Trial.pieces`): as many as keep every slice's data, on the
    ``nodes`` that share a host's memory, at least twice the last-level cache (``caches``:
    (L2, last-level) bytes, else this machine's), so a slice streams from memory as the
    whole call does and its time, scaled by size, is the call's.  1: the call is not cut."""
    last = (caches or cache_bytes())[1]
    return max(1, nodes * nbytes // (2 * last))


@lru_cache(maxsize=256)
def shape_key(backend: str, collective: str, nodes: int, dtype, op, nbytes: int, fixed) -> str:
    """The wisdom key of a call shape: sizes up to the next power of two plan together."""
    log2 = max(0, (max(nbytes, 1) - 1).bit_length())
    return f"{backend}|{collective}|{nodes}|{dtype}|{op}|{log2}|{fixed}"


_STALE = object()


@dataclass
class Trial:
    """The candidates of one call shape as its first calls try them."""

    candidates: list[tuple]
    budget: float
    # Per candidate, seconds it cannot beat (measured, e.g. waking worker threads): it waits
    # until those without one are timed, and is not tried when one of them is faster.
    floors: dict[tuple, float] = field(default_factory=dict)
    times: dict[tuple, list[float]] = field(default_factory=dict)
    spent: float = 0.0
    # Candidates whose first call ran: it makes the candidate's plan and binds it (a cold
    # call, many times a warm one), so it is not timed, or the first candidate tried would
    # win by being the only one ever timed warm.
    warmed: set = field(default_factory=set)
    # The run of each candidate's first call, its plan's making left out: what stands for a
    # candidate the budget ends before timing (at 1 GiB, a call is half the budget).
    firsts: dict[tuple, float] = field(default_factory=dict)
    refining: bool = False  # a second trial, of its first's winner against variants of it
    # How many candidates one call may run, each on its own slice of the buffers (a
    # planner's choice, see share()); 1: a call is one candidate's.
    pieces: int = 1
    # Candidates a planner has compared with the others already (the cpu's, by their
    # plans' units): not compared again as they first run.
    screened: set = field(default_factory=set)
    # Each timed candidate's least time as its times come, and the next call's candidates once
    # found (_STALE after a call is recorded): a trial call asks for them twice.
    _least: dict = field(default_factory=dict, init=False, repr=False)
    _group: object = field(default=None, init=False, repr=False)
    _shares: int = field(default=0, init=False, repr=False)  # calls that ran several
    # The candidates that may run again, in order, without a floor and with one: one
    # found out (timed enough, slower than DROP times the best, or a floor above it) stays
    # out, as the best only falls.  Each one's place in the order.
    _open: list = field(default_factory=list, init=False, repr=False)
    _floored: list = field(default_factory=list, init=False, repr=False)
    _rank: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._least = {c: min(t) for c, t in self.times.items()}
        self._group = _STALE
        self._open = [c for c in self.candidates if not self.floors.get(c)]
        self._floored = [c for c in self.candidates if self.floors.get(c)]
        self._rank = {c: k for k, c in enumerate(self.candidates)}

    def next(self) -> tuple | None:
        """The candidate the next call runs (round robin in the prior's order, so drift
        during the trial falls on every candidate alike), or None when planning is over;
        the first of :meth:`share` where a call runs several."""
        group = self.share()
        return group[0] if group else None

    def share(self) -> list[tuple]:
        """The candidates the next call runs, up to :attr:`pieces` of them, each on an
        equal slice of the buffers, in slice order (an allreduce is element-wise, so every
        slice's result is right whichever candidate made it): where one call is a good
        part of the budget, one call times several candidates, on the same memory at the
        same moment, instead of one.  Empty when planning is over."""
        if self._group is _STALE:
            self._group = self._find_group()
        return self._group  # type: ignore[return-value]

    def _find_group(self) -> list[tuple]:
        """:meth:`share` worked out: one pass over the candidates in play (a trial call at a
        few KiB asks it once, and takes a few µs itself)."""
        least, floors, times, warmed = self._least, self.floors, self.times, self.warmed
        best = min(least.values(), default=math.inf)
        cut = DROP * best
        # Once timed, a candidate's times count (within DROP of the best), else its floor;
        # while one without a floor is untimed, those with one wait (its time decides).
        left: list[tuple] = []  # (run already, calls timed, place, candidate)
        rank, still, untimed = self._rank, [], False
        for c in self._open:
            timed = times.get(c)
            if not timed:
                left.append((c in warmed, 0, rank[c], c))
                still.append(c)
                untimed = True
            elif len(timed) < REPEATS and least[c] <= cut:
                left.append((c in warmed, len(timed), rank[c], c))
                still.append(c)
        self._open = still
        if not untimed:
            still = []
            for c in self._floored:
                timed = times.get(c)
                if timed:
                    if len(timed) < REPEATS and least[c] <= cut:
                        left.append((c in warmed, len(timed), rank[c], c))
                        still.append(c)
                elif floors[c] <= best:
                    left.append((c in warmed, 0, rank[c], c))
                    still.append(c)
            self._floored = still
        # The fewest calls first; a candidate not yet run (its untimed first call) first.
        left.sort()
        group = [entry[3] for entry in left[: self.pieces]]
        if len(group) > 1:  # in another order each call: no candidate keeps one slice
            turn = self._shares % len(group)
            group = group[turn:] + group[:turn]
        if not group or len(warmed) < 2:
            return group
        # Not a call that would end past the budget (a candidate's time as known, else the
        # fastest's; several on equal slices take their mean), once two candidates have
        # run: choosing needs two.
        firsts = self.firsts
        guesses = [least[c] if c in least else firsts.get(c) for c in group]
        if None in guesses:
            known = self.scores()
            if not known:
                return group
            fastest = min(known.values())
            guesses = [fastest if g is None else g for g in guesses]
        if self.spent + sum(g or 0.0 for g in guesses) / len(guesses) > self.budget:
            return []
        return group

    def drop(self, candidate: tuple) -> None:
        """Try ``candidate`` no more (a planner found it the same as one tried)."""
        self.candidates = [c for c in self.candidates if c != candidate]
        self._open = [c for c in self._open if c != candidate]
        self._floored = [c for c in self._floored if c != candidate]
        self._group = _STALE

    def record(self, candidate: tuple, seconds: float, run: float | None = None) -> None:
        """One call's time; the process's planning cost counts it at once, so a shape still
        being planned when the process reports is counted too.  ``run``: of a first call,
        the time of its run alone (kept in :attr:`firsts`)."""
        self.spent += seconds
        self._group = _STALE
        spend(seconds)
        if candidate not in self.warmed:
            self.warmed.add(candidate)
            if run is not None:
                self.firsts[candidate] = run
            return
        self._timed(candidate, seconds)

    def record_share(self, seconds: dict[tuple, float], spent: float) -> None:
        """One call that ran several candidates (:meth:`share`): ``seconds``, each one's
        time for the whole buffers (its slice's, scaled by size), timed from its first
        run on (a slice past the caches is long beside making its plan, which is not
        timed); ``spent``: the call's."""
        self.spent += spent
        self._group = _STALE
        self._shares += 1
        spend(spent)
        for candidate, taken in seconds.items():
            self.warmed.add(candidate)
            self._timed(candidate, taken)

    def _timed(self, candidate: tuple, seconds: float) -> None:
        timed = self.times.setdefault(candidate, [])
        timed.append(seconds)
        self._least[candidate] = min(timed)

    def winner(self) -> tuple:
        """The candidate of least time (the first candidate if none ran): a timed one's
        least, or for one never timed its first run."""
        scores = self.scores()
        if not scores:
            return self.candidates[0]
        return min(scores, key=scores.__getitem__)

    def scores(self) -> dict[tuple, float]:
        """Each candidate's time: the least of its timed calls, else its first run's.  The
        least, as FFTW's planner takes: noise, and the warming of a call's code and data
        while a trial goes on, only ever add time, and at a few µs they are most of the
        spread (a median of three would take the middle of a downward drift)."""
        untimed = {c: t for c, t in self.firsts.items() if c not in self.times}
        return untimed | self._least


def plan_problem(entry: object) -> str | None:
    """Why ``entry``, a plan of a wisdom file, is not one this library can run, or None.
    A plan names its backend and collective, and its choice is what that backend's planner
    chose: ``[algorithm, executor, inline, tile bytes or null]`` on the cpu, ``[algorithm]``
    under MPI, the algorithm one of the collective's, the executor one of
    :data:`ring.schedule.EXECUTORS`; its ``seconds`` (each candidate's time) are numbers."""
    if not isinstance(entry, dict):
        return "not a plan"
    backend, collective, choice = entry.get("backend"), entry.get("collective"), entry.get("choice")
    if not isinstance(collective, str) or collective not in COLLECTIVES:
        return f"collective {_shown(collective)} is not one of {', '.join(COLLECTIVES)}"
    forms = {"cpu": "[algorithm, executor, inline, tile]", "mpi": "[algorithm]"}
    if not isinstance(backend, str) or backend not in forms:
        return f"backend {_shown(backend)} is not one of {', '.join(forms)}"
    if not isinstance(choice, list) or len(choice) != (4 if backend == "cpu" else 1):
        return f"choice {_shown(choice)} is not {forms[backend]}"
    algorithm = choice[0]
    if not isinstance(algorithm, str) or algorithm not in algorithms_of(collective):
        return f"algorithm {_shown(algorithm)} is not one of {collective}'s"
    if backend == "cpu":
        _, executor, inline, tile = choice
        if not isinstance(executor, str) or executor not in EXECUTORS:
            return f"executor {_shown(executor)} is not one of {', '.join(EXECUTORS)}"
        if not isinstance(inline, bool):
            return f"inline {_shown(inline)} is not true or false"
        if tile is not None and (type(tile) is not int or tile <= 0):
            return f"tile {_shown(tile)} is not a number of bytes"
    seconds = entry.get("seconds", {})
    if not isinstance(seconds, dict) or not all(type(t) in (int, float) for t in seconds.values()):
        return "its seconds are not numbers"
    return None


def _shown(value: object) -> str:
    """``value`` for a one-line message: short, whatever a file nested in it."""
    return reprlib.repr(value)


class _Unusable(Exception):
    """A wisdom file that cannot be used at all (its message says why, in one line)."""


class Wisdom:
    """The plans of one wisdom file, read when made (:func:`wisdom`: this process's).

    A file that cannot be used is ignored with one warning (:attr:`problem` says why), and
    plans of it this library cannot run are dropped with one (:attr:`dropped`).  Writes
    merge: :meth:`put` adds its plan to what the file holds at that moment, under a lock
    on ``.NAME.lock`` beside it, so processes sharing a file keep each other's plans."""

    def __init__(self, path: Path | None):
        self.path = path
        self.plans: dict[str, dict] = {}
        self.problem: str | None = None  # why the file was ignored
        self.dropped: list[str] = []  # its plans dropped, each "KEY: why"
        self._lock = threading.Lock()
        if path is not None:
            self.plans = self._read(path)

    @staticmethod
    def _header() -> dict:
        return {"schema": SCHEMA, "library": __version__, "host": host_label()}

    def _read(self, path: Path) -> dict[str, dict]:
        """The plans of ``path`` this library can run; what it could not use, said in one
        warning."""
        try:
            plans, self.dropped = _load(path, self._header())
        except _Unusable as exc:
            self.problem = str(exc)
            warnings.warn(self.problem, WisdomWarning, stacklevel=4)
            return {}
        if self.dropped:
            warnings.warn(_dropped_text(path, self.dropped), WisdomWarning, stacklevel=4)
        return plans

    def get(self, key: str) -> tuple | None:
        plan = self.plans.get(key)
        return None if plan is None else tuple(plan["choice"])

    def put(self, key: str, trial: Trial, backend: str, collective: str) -> None:
        """Keep the trial's winner as the plan of ``key`` (a shape of ``backend`` and
        ``collective``), and merge it into the file.  Never raises but for an interruption:
        a file that cannot be written is said in one warning (a rank of an MPI job that
        raised alone here would leave the others waiting)."""
        scores = {"/".join(map(str, c)): t for c, t in trial.scores().items()}
        entry: dict = {"backend": backend, "collective": collective, "seconds": scores}
        entry["choice"] = list(trial.winner())
        with self._lock:
            self.plans[key] = entry
            if self.path is not None:
                self.merge({key: entry})

    def merge(self, plans: dict[str, dict]) -> bool:
        """Write ``plans`` into the file, over what it holds now, under its lock; this
        object then holds the file's other plans too.  False, with one warning, where it
        could not be written."""
        assert self.path is not None
        try:
            with _locked(self.path):
                try:
                    found, _ = _load(self.path, self._header())
                except _Unusable:  # replaced, as the reader was told when it read it
                    found = {}
                found.update(plans)
                written = self._write(self.path, found)
        except Exception as exc:  # noqa: BLE001 - the lock: one warning, as a failed write
            warnings.warn(_not_written(self.path, exc), WisdomWarning, stacklevel=4)
            return False
        if written:
            self.plans.update(found)
        return written

    def _write(self, path: Path, plans: dict[str, dict]) -> bool:
        """``plans`` written whole and renamed into place: an interrupted write leaves the
        old file.  The file's mode is what the umask leaves of 0666, as any new file's.
        False, with one warning, where it could not be written."""
        document = {**self._header(), "plans": plans}
        temporary = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary, out = _new_file(path)
            with out:
                json.dump(document, out, indent=1, sort_keys=True)
            os.replace(temporary, path)
            return True
        except (OSError, ValueError) as exc:
            if temporary is not None:
                temporary.unlink(missing_ok=True)
            warnings.warn(_not_written(path, exc), WisdomWarning, stacklevel=4)
            return False
        except BaseException:
            if temporary is not None:
                temporary.unlink(missing_ok=True)
            raise


def _load(path: Path, header: dict) -> tuple[dict[str, dict], list[str]]:
    """(plans this library can run, "KEY: why" of each other plan) of the wisdom file
    ``path`` (none: no plans); raises :class:`_Unusable` where it cannot be used at all:
    unreadable, larger than :data:`MAX_BYTES`, not JSON (nested past the parser's depth
    too), not wisdom, or of another schema, version or host than ``header``."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):  # no file there (yet)
        return {}, []
    except OSError as exc:
        raise _Unusable(f"{path}: wisdom ignored ({exc.strerror or exc})") from None
    if len(text) > MAX_BYTES:
        raise _Unusable(
            f"{path}: wisdom ignored (larger than {MAX_BYTES >> 20} MiB: not a wisdom file)"
        )
    try:
        document = json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError, MemoryError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc) or "too large"
        raise _Unusable(f"{path}: wisdom ignored (not JSON: {why})") from None
    if not isinstance(document, dict) or not isinstance(document.get("plans"), dict):
        raise _Unusable(f"{path}: wisdom ignored (not a wisdom file: it has no plans)")
    found = {k: document.get(k) for k in header}
    if found != header:
        said = ", ".join(f"{k} {_shown(v)}" for k, v in found.items())
        raise _Unusable(f"{path}: wisdom of {said} ignored: plans are measured again on this one")
    plans, dropped = {}, []
    for key, entry in document["plans"].items():
        problem = plan_problem(entry)
        if problem is None:
            plans[key] = entry
        else:
            dropped.append(f"{key}: {problem}")
    return plans, dropped


def _dropped_text(path: Path, dropped: list[str]) -> str:
    more = f" (and {len(dropped) - 1} more)" if len(dropped) > 1 else ""
    return f"{path}: {len(dropped)} plan(s) dropped, not this library's: {dropped[0]}{more}"


def _not_written(path: Path, exc: BaseException) -> str:
    return f"{path}: wisdom not written ({getattr(exc, 'strerror', None) or exc})"


def _new_file(path: Path):
    """(path, text file open for writing) of a new file beside ``path``, made with mode
    0666 less the umask (``tempfile``'s are 0600 whatever the umask says)."""
    for _ in range(100):
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        return temporary, os.fdopen(descriptor, "w", encoding="utf-8")
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))


@contextmanager
def _locked(path: Path):
    """Hold the lock of the wisdom file ``path`` (``flock`` on ``.NAME.lock`` beside it,
    kept: removing it would let two writers hold two locks).  A lock still held by
    another process after :data:`LOCK_SECONDS` raises TimeoutError, so a stopped process
    cannot stall its peers' writes."""
    if fcntl is None:  # no flock here: writes still replace the file whole
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + LOCK_SECONDS
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"its lock was held by another process for {LOCK_SECONDS:g} s"
                    ) from None
                time.sleep(0.01)
        yield
    finally:
        os.close(descriptor)  # and with it the lock


class PlanningCost(NamedTuple):
    """What planning by measuring cost this process: calls that ran to plan, and their
    seconds."""

    calls: int
    seconds: float


_cost = PlanningCost(0, 0.0)
_cost_lock = threading.Lock()


def spend(seconds: float) -> None:
    """Count one call that ran to plan (kept apart from the wisdom file, which a rank that
    does not write plans never reads)."""
    global _cost
    with _cost_lock:
        _cost = PlanningCost(_cost.calls + 1, _cost.seconds + seconds)


def planning_cost() -> PlanningCost:
    """What planning cost this process since it started (or since :func:`forget_process`)."""
    return _cost


_wisdom: Wisdom | None = None
_wisdom_lock = threading.Lock()


def wisdom() -> Wisdom:
    """This process's wisdom, read on first use (:func:`forget_process` reads it again)."""
    global _wisdom
    known = _wisdom  # read once: forget_process() may drop it meanwhile
    if known is not None:
        return known
    with _wisdom_lock:
        if _wisdom is None:
            _wisdom = Wisdom(wisdom_path())
        return _wisdom


_generation = 0


def generation() -> int:
    """How many times :func:`forget_process` ran: a plan memo of an older one is stale."""
    return _generation


def forget_process() -> None:
    """Drop the plans this process holds (the next call reads the file again), and its
    planning cost so far."""
    global _wisdom, _generation, _cost
    with _wisdom_lock:
        _wisdom = None
        _generation += 1
        with _cost_lock:
            _cost = PlanningCost(0, 0.0)


def _after_fork_in_child() -> None:
    """A child of ``fork()`` has one thread: a lock another thread of its parent held at
    the fork would stay held.  Its plans are its parent's."""
    global _wisdom_lock, _cost_lock
    _wisdom_lock, _cost_lock = threading.Lock(), threading.Lock()
    if _wisdom is not None:
        _wisdom._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


USAGE = "usage: python -m ring.wisdom show | export FILE | import FILE | forget"


def main(argv: list[str] | None = None) -> int:
    """``python -m ring.wisdom show | export FILE | import FILE | forget``: each error is
    one line on stderr (exit 1; 2 for a command line it does not take)."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    path = wisdom_path()
    if path is None:
        print(f"ring.wisdom: {WISDOM_ENV}=off: no wisdom file", file=sys.stderr)
        return 2
    if not args or args[0] not in ("show", "export", "import", "forget"):
        print(USAGE, file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    wanted = 1 if command in ("export", "import") else 0
    if len(rest) != wanted:
        print(
            f"ring.wisdom: {command} takes {'one FILE' if wanted else 'no FILE'}", file=sys.stderr
        )
        return 2
    with warnings.catch_warnings(record=True) as said:  # each said in one line below
        warnings.simplefilter("always", WisdomWarning)
        code = _command(command, path, rest)
    for warning in said:
        if issubclass(warning.category, WisdomWarning):
            print(f"ring.wisdom: {warning.message}", file=sys.stderr)
    return code


def _command(command: str, path: Path, rest: list[str]) -> int:
    if command == "forget":
        try:
            with _locked(path):
                path.unlink(missing_ok=True)
        except OSError as exc:
            print(f"ring.wisdom: forget: {path}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        return 0
    if command == "import":
        theirs = _imported(Path(rest[0]))
        if theirs is None:
            return 1
        return 0 if Wisdom(path).merge(theirs) else 1
    mine = Wisdom(path)
    if mine.problem is not None:  # said as a warning: nothing to show or export
        return 1
    if command == "show":
        for key, plan in sorted(mine.plans.items()):
            print(f"{key}: {'/'.join(map(str, plan['choice']))}")
        return 0
    return 0 if mine._write(Path(rest[0]), mine.plans) else 1


def _imported(source: Path) -> dict | None:
    """The plans of ``source`` for ``import``; None, said in one line, where there is no
    such file or it cannot be used here (unreadable, not wisdom, of another host or
    version, or holding a plan this library cannot run): importing less than the file
    holds is not a success."""
    if not source.is_file():
        print(
            f"ring.wisdom: {source}: {'not a file' if source.exists() else 'no such file'}",
            file=sys.stderr,
        )
        return None
    try:
        plans, dropped = _load(source, Wisdom._header())
    except _Unusable as exc:
        print(f"ring.wisdom: not imported: {exc}", file=sys.stderr)
        return None
    if dropped:
        print(f"ring.wisdom: not imported: {_dropped_text(source, dropped)}", file=sys.stderr)
        return None
    return plans


if __name__ == "__main__":
    sys.exit(main())
