"""The wisdom store: the plans of ``algorithm="auto"`` kept in a JSON file for the next
process (as FFTW's wisdom files keep its planner's plans).

The file is ``$XDG_CACHE_HOME/ring/wisdom.json`` (default ``~/.cache/ring/wisdom.json``);
``RING_WISDOM`` names another, and ``RING_WISDOM=off`` keeps plans in memory only.  A file
is written whole and renamed into place, so an interrupted write leaves the old one, with
the mode the umask gives a new file.  A write merges: under a lock on ``.NAME.lock`` beside
the file, it adds its plan to what the file holds then, so processes sharing one file keep
each other's plans.  The file names the host (:func:`ring.machine.host_label`), the
library's version and the format's schema: a file from another host or version, or one that
cannot be read or parsed (larger than ``MAX_BYTES``, nested past the parser's depth), is
ignored with one warning and replaced on the next write.  Every plan is checked against
the library's algorithms and executors as it is read (:func:`plan_problem`): one it cannot
run is dropped, all of them said in one warning.  A plan records each candidate's time and
the candidates that tied with its choice (``tied``: within the race's noise,
:meth:`ring.planning.race.Trial.tied`).  ``python -m ring.wisdom``
(:mod:`ring.planning.cli`) manages the file.
"""

from __future__ import annotations

import errno
import json
import os
import reprlib
import secrets
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from .._version import __version__
from ..machine import host_label
from ..schedule import COLLECTIVES, EXECUTORS, algorithms_of
from .race import Trial, forget_cost

try:
    import fcntl
except ImportError:  # no flock (Windows): a write still replaces the file whole
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_SECONDS",
    "MAX_BYTES",
    "SCHEMA",
    "WISDOM_ENV",
    "Unusable",
    "Wisdom",
    "WisdomWarning",
    "dropped_text",
    "forget_process",
    "generation",
    "load",
    "locked",
    "plan_problem",
    "wisdom",
    "wisdom_path",
]

WISDOM_ENV = "RING_WISDOM"
SCHEMA = 3
# A wisdom file larger than this is not one (a plan is a few hundred bytes).
MAX_BYTES = 16 << 20
# How long a write waits for another process's hold of the file's lock before giving up.
LOCK_SECONDS = 10.0


class WisdomWarning(UserWarning):
    """A wisdom file that could not be used: the plans are measured again."""


def wisdom_path() -> Path | None:
    """Where plans are kept (None: ``RING_WISDOM=off``, in memory only)."""
    chosen = os.environ.get(WISDOM_ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "none") else Path(chosen)
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "ring" / "wisdom.json"


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
    forms = {
        "cpu": "[algorithm, executor, inline, tile]",
        "mpi": "[algorithm]",
        "gpu": "[algorithm]",
    }
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
    tied = entry.get("tied", [])
    if not isinstance(tied, list) or not all(isinstance(c, str) for c in tied):
        return f"tied {_shown(tied)} is not a list of candidates"
    return None


def _shown(value: object) -> str:
    """``value`` for a one-line message: short, whatever a file nested in it."""
    return reprlib.repr(value)


class Unusable(Exception):
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
    def header() -> dict:
        return {"schema": SCHEMA, "library": __version__, "host": host_label()}

    def _read(self, path: Path) -> dict[str, dict]:
        """The plans of ``path`` this library can run; what it could not use, said in one
        warning."""
        try:
            plans, self.dropped = load(path, self.header())
        except Unusable as exc:
            self.problem = str(exc)
            warnings.warn(self.problem, WisdomWarning, stacklevel=4)
            return {}
        if self.dropped:
            warnings.warn(dropped_text(path, self.dropped), WisdomWarning, stacklevel=4)
        return plans

    def after_fork(self) -> None:
        """In the child of a ``fork()``: a new lock (another thread may have held this one)."""
        self._lock = threading.Lock()

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
        entry["tied"] = ["/".join(map(str, c)) for c in trial.tied()[1:]]
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
            with locked(self.path):
                try:
                    found, _ = load(self.path, self.header())
                except Unusable:  # replaced, as the reader was told when it read it
                    found = {}
                found.update(plans)
                written = self.write(self.path, found)
        except Exception as exc:  # noqa: BLE001 - the lock: one warning, as a failed write
            warnings.warn(_not_written(self.path, exc), WisdomWarning, stacklevel=4)
            return False
        if written:
            self.plans.update(found)
        return written

    def write(self, path: Path, plans: dict[str, dict]) -> bool:
        """``plans`` written whole and renamed into place: an interrupted write leaves the
        old file.  The file's mode is what the umask leaves of 0666, as any new file's.
        False, with one warning, where it could not be written."""
        document = {**self.header(), "plans": plans}
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


def load(path: Path, header: dict) -> tuple[dict[str, dict], list[str]]:
    """(plans this library can run, "KEY: why" of each other plan) of the wisdom file
    ``path`` (none: no plans); raises :class:`Unusable` where it cannot be used at all:
    unreadable, larger than :data:`MAX_BYTES`, not JSON (nested past the parser's depth
    too), not wisdom, or of another schema, version or host than ``header``."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):  # no file there (yet)
        return {}, []
    except OSError as exc:
        raise Unusable(f"{path}: wisdom ignored ({exc.strerror or exc})") from None
    if len(text) > MAX_BYTES:
        raise Unusable(
            f"{path}: wisdom ignored (larger than {MAX_BYTES >> 20} MiB: not a wisdom file)"
        )
    try:
        document = json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError, MemoryError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc) or "too large"
        raise Unusable(f"{path}: wisdom ignored (not JSON: {why})") from None
    if not isinstance(document, dict) or not isinstance(document.get("plans"), dict):
        raise Unusable(f"{path}: wisdom ignored (not a wisdom file: it has no plans)")
    found = {k: document.get(k) for k in header}
    if found != header:
        said = ", ".join(f"{k} {_shown(v)}" for k, v in found.items())
        raise Unusable(f"{path}: wisdom of {said} ignored: plans are measured again on this one")
    plans, dropped = {}, []
    for key, entry in document["plans"].items():
        problem = plan_problem(entry)
        if problem is None:
            plans[key] = entry
        else:
            dropped.append(f"{key}: {problem}")
    return plans, dropped


def dropped_text(path: Path, dropped: list[str]) -> str:
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
def locked(path: Path):
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
    global _wisdom, _generation
    with _wisdom_lock:
        _wisdom = None
        _generation += 1
        forget_cost()


def _after_fork_in_child() -> None:
    """A child of ``fork()`` has one thread: a lock another thread of its parent held at
    the fork would stay held.  Its plans are its parent's."""
    global _wisdom_lock
    _wisdom_lock = threading.Lock()
    if _wisdom is not None:
        _wisdom.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
