"""Rows, and writing and reading the result files whose schema :mod:`ring.bench.schema`
holds: the tidy CSV, the JSON beside it and the per-call samples, written as one.

``busbw_GBps`` = algbw·2(N-1)/N, nccl-tests' allreduce factor, which is 0 for N = 1
(nothing crosses a link).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from .outputs import file_problem
from .schema import COLUMNS, MIGRATION, SAMPLE_COLUMNS, SCHEMA, SCHEMA_COLUMNS, TIME_COLUMNS

__all__ = [
    "COLUMNS",
    "MIGRATION",
    "SAMPLE_COLUMNS",
    "SCHEMA",
    "TIME_COLUMNS",
    "InterruptedAfterWriting",
    "busbw_factor",
    "check_pair",
    "file_sha256",
    "make_row",
    "output_problem",
    "read_csv",
    "samples_path",
    "schema_problem",
    "signals_deferred",
    "write_csv_atomic",
    "write_json_atomic",
    "write_result_pair",
    "write_text_atomic",
]


# The schema is ring.bench.schema's; its names stay importable from here.
def samples_path(csv_path: Path) -> Path:
    """``results/cpu/x.csv`` -> ``results/cpu/x.samples.csv``."""
    return Path(csv_path).with_suffix(".samples.csv")


def busbw_factor(nodes: int) -> float:
    """nccl-tests' allreduce bus factor 2(N-1)/N; 0 for one node.  The one definition: the
    report imports it."""
    return 2 * (nodes - 1) / nodes if nodes > 1 else 0.0


def make_row(
    *,
    backend: str,
    sync: str,
    algorithm: str,
    nodes: int,
    dtype: np.dtype,
    op: str,
    nbytes: int,
    count: int,
    times_s: Sequence[float],
    traffic_bytes: int | None,
    wrong: int | None,
    shared_devices: bool | None,
    extras: dict | None = None,
) -> dict:
    times_us = np.asarray(times_s, dtype=np.float64) * 1e6
    lo, p25, median, p75, hi = np.percentile(times_us, [0, 25, 50, 75, 100])
    seconds = median / 1e6
    algbw = nbytes / seconds / 1e9 if seconds > 0 else None
    row = {
        "backend": backend,
        "sync": sync,
        "algorithm": algorithm,
        "nodes": nodes,
        "dtype": np.dtype(dtype).name,
        "op": op,
        "bytes": nbytes,
        "count": count,
        "iters": len(times_us),
        "time_us": float(median),
        "time_us_min": float(lo),
        "time_us_p25": float(p25),
        "time_us_p75": float(p75),
        "time_us_max": float(hi),
        "algbw_GBps": algbw,
        "busbw_GBps": None if algbw is None else algbw * busbw_factor(nodes),
        "traffic_GBps": (
            traffic_bytes / seconds / 1e9 if traffic_bytes is not None and seconds > 0 else None
        ),
        "wrong": wrong,
        # Empty on host rows: only GPU nodes can share a device.
        "shared_devices": None if shared_devices is None else bool(shared_devices),
    }
    row.update(extras or {})
    return row


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".6g")
    return str(value)


def columns_of(rows: Iterable[dict], first: Sequence[str] = COLUMNS) -> list[str]:
    """``first``, then any further keys in the order rows bring them."""
    names = dict.fromkeys(first)
    for row in rows:
        names.update(dict.fromkeys(row))
    return list(names)


def csv_text(rows: Sequence[dict], columns: Sequence[str] | None = None) -> str:
    columns = list(columns or columns_of(rows))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(name)) for name in columns])
    return buffer.getvalue()


def _temporary_beside(path: Path, text: str) -> Path:
    """``text`` in a new file beside ``path`` (fsynced, readable by everyone); its name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp makes the file private (0600); results are for everyone to read.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


_DEFERRED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


@contextlib.contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is done: their handlers only record
    them meanwhile.  Yields the list of the signals that arrived; the caller acts on them
    (see :func:`write_result_pair`).  Outside the main thread nothing can be deferred."""
    caught: list[int] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in _DEFERRED_SIGNALS:
            previous[signum] = signal.signal(signum, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def write_text_atomic(path: Path, text: str) -> None:
    """Write beside ``path`` and rename over it: readers see the old file or the whole new
    one, and an interrupted write leaves nothing under ``path``."""
    tmp = _temporary_beside(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_csv_atomic(path: Path, rows: Sequence[dict], columns: Sequence[str] | None = None):
    write_text_atomic(path, csv_text(rows, columns))


def write_json_atomic(path: Path, document: dict) -> None:
    write_text_atomic(path, json.dumps(document, indent=2, allow_nan=False) + "\n")


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class InterruptedAfterWriting(KeyboardInterrupt):
    """A Ctrl-C that arrived while a result pair was written: the pair is complete."""


def write_result_pair(
    csv_path: Path,
    rows: Sequence[dict],
    columns: Sequence[str] | None,
    document: dict,
    sides: Sequence[tuple[Path, str]] = (),
) -> None:
    """``FILE.csv`` and ``FILE.json`` as one pair: both written to temporaries, then renamed,
    CSV first and JSON last, all with signals deferred (a few milliseconds), so a signal
    never leaves half a pair or a temporary behind; a Ctrl-C arrives afterwards as
    :class:`InterruptedAfterWriting`, SIGTERM/SIGHUP with their own effect.  The JSON
    records the CSV's SHA-256 (``csv_sha256``), so a reader can tell a pair that a crash
    between the renames left mismatched (:func:`check_pair`).  On an error nothing is left
    behind and the old pair stands.  ``sides`` (path, text) are written the same way, before
    the pair (the per-call samples: a pair on disk has its samples beside it); the JSON
    records the samples' SHA-256 too (``samples_sha256``).  A pair written without samples
    removes the ``FILE.samples.csv`` an earlier run left, before its CSV is renamed: a
    reader must never take an earlier run's calls for this one's."""
    csv_path = Path(csv_path)
    text = csv_text(rows, columns)
    document = {**document, "csv_sha256": text_sha256(text)}
    samples = samples_path(csv_path)
    for path, content in sides:
        if Path(path) == samples:
            document["samples_sha256"] = text_sha256(content)
    json_text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    with signals_deferred() as caught:
        temporaries: list[Path] = []
        targets = [*(Path(p) for p, _ in sides), csv_path, csv_path.with_suffix(".json")]
        try:
            for path, content in [*sides, (csv_path, text), (targets[-1], json_text)]:
                temporaries.append(_temporary_beside(Path(path), content))
            if samples not in targets:
                samples.unlink(missing_ok=True)
            for temporary, target in zip(temporaries, targets, strict=True):
                os.replace(temporary, target)
        finally:
            for tmp in temporaries:
                tmp.unlink(missing_ok=True)
    for signum in caught:
        if signum == signal.SIGINT:
            raise InterruptedAfterWriting(str(csv_path))
        signal.raise_signal(signum)  # SIGTERM, SIGHUP: now, with their own handlers


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes: what ``csv_sha256`` and ``samples_sha256`` record."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_pair(csv_path: Path, document: dict, json_path: Path | None = None) -> str | None:
    """Why ``csv_path`` does not belong with its JSON ``document`` (read from ``json_path``,
    by default the one beside it), or None if it does (or the JSON predates
    ``csv_sha256``).  The samples beside the CSV are checked the same way where the JSON
    records ``samples_sha256``: a missing samples file is no mismatch (a reader then has
    no per-call times), one from another run is."""
    json_path = Path(csv_path).with_suffix(".json") if json_path is None else Path(json_path)
    recorded = {
        Path(csv_path): document.get("csv_sha256"),
        samples_path(csv_path): document.get("samples_sha256"),
    }
    for path, digest in recorded.items():
        if digest is None or (path != Path(csv_path) and not path.is_file()):
            continue
        try:
            actual = file_sha256(path)
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror or exc}"
        if actual != digest:
            name = "csv_sha256" if path == Path(csv_path) else "samples_sha256"
            return (
                f"{path} does not match {json_path} (its {name} differs): the files were "
                "not written together; run the measurement (or the merge) again"
            )
    return None


def schema_problem(
    path: Path, columns: Sequence[str] | None = None, document: object = None
) -> str | None:
    """Why the result at ``path`` is not of schema :data:`SCHEMA`, in one line naming the
    migration, or None.  ``document``: its JSON, where the reader has it; ``columns``: the
    CSV's header, where the reader reads a tidy result CSV."""
    if document is not None:
        found = document.get("schema") if isinstance(document, dict) else None
        if found != SCHEMA:
            if found is None:
                said = "no ring.bench schema"
            elif type(found) is int:
                said = f"ring.bench schema {found}"
            else:  # "2" is not 2: shown as it is written, or it reads as the schema taken
                said = f"ring.bench schema {found!r} (a {type(found).__name__}, not a whole number)"
            return f"{path}: {said}, this reader takes {SCHEMA}; {MIGRATION}"
    missing = [c for c in SCHEMA_COLUMNS if columns is not None and c not in columns]
    if missing:
        return f"{path}: no column {', '.join(missing)} (ring.bench schema 1); {MIGRATION}"
    return None


def output_problem(path: Path) -> str | None:
    """Why results cannot be written to ``path`` (and the JSON beside it), or None."""
    return file_problem(path, "--out")


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)
