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
interrupted write leaves the old one.  It names the host (:func:`ring.machine.host_label`)
and the library's version: a file from another host or version, or one that cannot be
read, is ignored with one warning and replaced on the next write.
``python -m ring.wisdom show|export FILE|import FILE|forget`` manages it; an import of a
file it cannot use here, or an export it cannot write, fails (exit 1) in one line.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ._version import __version__
from .machine import cache_bytes, host_label

__all__ = [
    "BUDGET_ENV",
    "DROP",
    "PLANNING",
    "REPEATS",
    "TOP",
    "WISDOM_ENV",
    "Trial",
    "Wisdom",
    "WisdomWarning",
    "budget_seconds",
    "check_planning",
    "forget_process",
    "generation",
    "shape_key",
    "slices_apart",
    "wisdom",
    "wisdom_path",
]

WISDOM_ENV = "RING_WISDOM"
BUDGET_ENV = "RING_PLAN_BUDGET"
SCHEMA = 2
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
        wisdom().spend(seconds)
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
        wisdom().spend(spent)
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


class Wisdom:
    """The plans of this process, read from and written to :func:`wisdom_path`."""

    def __init__(self, path: Path | None):
        self.path = path
        self.plans: dict[str, dict] = {}
        self.calls = 0  # calls that ran to plan, and their seconds (the cost of planning)
        self.seconds = 0.0
        self._lock = threading.Lock()
        if path is not None:
            self.plans = self._read(path)

    @staticmethod
    def _header() -> dict:
        return {"schema": SCHEMA, "library": __version__, "host": host_label()}

    def _read(self, path: Path) -> dict[str, dict]:
        if not path.exists():
            return {}
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            header = {k: document[k] for k in ("schema", "library", "host")}
            plans = document["plans"]
            if not isinstance(plans, dict) or not all(
                isinstance(p, dict) and isinstance(p.get("choice"), list) for p in plans.values()
            ):
                raise ValueError("its plans are not plans")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            warnings.warn(f"{path}: wisdom ignored ({exc})", WisdomWarning, stacklevel=4)
            return {}
        if header != self._header():
            said = ", ".join(f"{k} {v!r}" for k, v in header.items())
            warnings.warn(
                f"{path}: wisdom of {said} ignored: plans are measured again on this one",
                WisdomWarning,
                stacklevel=4,
            )
            return {}
        return plans

    def get(self, key: str) -> tuple | None:
        plan = self.plans.get(key)
        return None if plan is None else tuple(plan["choice"])

    def spend(self, seconds: float) -> None:
        """Count one call that ran to plan."""
        with self._lock:
            self.calls += 1
            self.seconds += seconds

    def put(self, key: str, trial: Trial) -> None:
        """Keep the trial's winner, and write the file."""
        scores = {"/".join(map(str, c)): t for c, t in trial.scores().items()}
        with self._lock:
            self.plans[key] = {"choice": list(trial.winner()), "seconds": scores}
            if self.path is not None:
                self._write(self.path)

    def _write(self, path: Path) -> bool:
        """Written whole and renamed into place: an interrupted write leaves the old file.
        False, with one warning, where it could not be written."""
        document = {**self._header(), "plans": self.plans}
        out = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8"
            ) as out:
                json.dump(document, out, indent=1, sort_keys=True)
            os.replace(out.name, path)
            return True
        except OSError as exc:
            if out is not None:
                Path(out.name).unlink(missing_ok=True)
            warnings.warn(f"{path}: wisdom not written ({exc})", WisdomWarning, stacklevel=4)
            return False
        except BaseException:
            if out is not None:
                Path(out.name).unlink(missing_ok=True)
            raise


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
    """Drop the plans this process holds (the next call reads the file again)."""
    global _wisdom, _generation
    with _wisdom_lock:
        _wisdom = None
        _generation += 1


def main(argv: list[str] | None = None) -> int:
    """``python -m ring.wisdom show | export FILE | import FILE | forget``."""
    args = sys.argv[1:] if argv is None else argv
    path = wisdom_path()
    if not args or args[0] not in ("show", "export", "import", "forget") or path is None:
        print(__doc__ if path else f"{WISDOM_ENV}=off: no wisdom file", file=sys.stderr)
        return 2
    command, rest = args[0], args[1:]
    if command in ("export", "import") and len(rest) != 1:
        print(f"ring.wisdom: {command} needs one FILE", file=sys.stderr)
        return 2
    if command == "show":
        for key, plan in sorted(Wisdom(path).plans.items()):
            print(f"{key}: {'/'.join(map(str, plan['choice']))}")
    elif command == "export":
        return 0 if Wisdom(path)._write(Path(rest[0])) else 1
    elif command == "import":
        theirs = _imported(Path(rest[0]))
        if theirs is None:
            return 1
        mine = Wisdom(path)
        mine.plans.update(theirs)
        return 0 if mine._write(path) else 1
    else:
        path.unlink(missing_ok=True)
    return 0


def _imported(source: Path) -> dict | None:
    """The plans of ``source`` for ``import``; None, said in one line, where there is no
    such file or it cannot be used here (unreadable, not wisdom, or of another host or
    version): importing nothing is not a success."""
    if not source.is_file():
        print(f"ring.wisdom: {source}: no such file", file=sys.stderr)
        return None
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", WisdomWarning)
        plans = Wisdom(source).plans
    refused = [w for w in said if issubclass(w.category, WisdomWarning)]
    if refused:
        print(f"ring.wisdom: not imported: {refused[0].message}", file=sys.stderr)
        return None
    return plans


if __name__ == "__main__":
    sys.exit(main())
