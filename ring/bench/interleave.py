"""Every series of one invocation measured size by size, in turn.

A comparison of our ring with its peers is only as good as the conditions the two shared.
On a machine whose memory bandwidth swings within a minute, series measured one after the
other (all sizes of A, then all sizes of B) can differ by 2x for reasons that have nothing
to do with either; measured at each size back to back, they see the same machine.  So every
(backend, sync, algorithm, N) session stays open for the whole sweep and each size visits
all of them before the next size starts.  A session drops its buffers after its point
(:meth:`Session.release`), so only one point's buffers are held at a time.

Drift faster than one size's sweep still lands on whichever series ran at that moment.
``--rounds R`` splits each size's timed calls into R rounds that visit every series in
turn, so such drift reaches all of them alike; the price is that every series of the size
holds its buffers at once.

A point that fails (a full ``RING_SHM_DIR``, a device out of memory) ends the sweep with
:class:`SweepFailed`, which carries the series with the rows measured before it: the
harness writes those as a partial result rather than losing them.
"""

from __future__ import annotations

import contextlib

from .._optional import MissingDependencyError
from .backends import Session
from .flags import BenchInputError
from .nccl_compat import table_header, table_line
from .osu import osu_header, osu_line
from .point import round_shares
from .schema import VARIANT_COLUMNS
from .series import Series, series_of

__all__ = ["SweepFailed", "measure_interleaved"]


class SweepFailed(Exception):
    """A point of the sweep raised ``error``: ``series`` hold the rows measured before it,
    ``nbytes`` is the size it failed at (None: before the first, opening a session)."""

    def __init__(self, series: list[Series], nbytes: int | None, error: Exception):
        super().__init__(f"{type(error).__name__}: {error}")
        self.series, self.nbytes, self.error = series, nbytes, error


def measure_interleaved(plan, start_point, output) -> list[Series]:
    """Measure every series at every size, sizes outermost; return the series in plan order.

    ``start_point(session, series, count)`` loads one point and returns a
    :class:`~ring.bench.point.Point`, which warms up just before its first timed calls.
    With one round each series' calls run back to back and only one point's buffers are
    held at a time; with ``--rounds R`` every series of a size holds its buffers while the
    timed calls go round them R times.
    """
    config = plan.config
    rounds = config.rounds
    series = series_of(plan)
    width = max(len(s.label) for s in series)
    for s in series:
        output.line(f"# series {s.label:<{width}}  traffic {s.backend.traffic or 'N/A'}")
    for line in table_header_lines(config, series):
        output.line(line)
    sessions: list[Session] = []
    visits = list(range(len(series)))
    if config.order == "reverse":
        visits.reverse()
    together = [visits] if rounds > 1 else [[i] for i in visits]
    nbytes, done = None, False
    try:
        for s in series:
            sessions.append(s.select().open(s.nodes, s.sync, config, plan.world))
        for count in config.counts:
            nbytes = count * config.dtype.itemsize
            for group in together:
                _measure_group(series, sessions, group, count, start_point, output, config)
        done = True
    except (BenchInputError, MissingDependencyError):
        raise  # the input, refused in one line as before any measurement
    except Exception as exc:
        raise SweepFailed(series, nbytes, exc) from exc
    finally:
        for session in sessions:
            # After a failure (or a Ctrl-C) that is what to report, not a session's close.
            with contextlib.nullcontext() if done else contextlib.suppress(Exception):
                session.close()
    return series


def out_of_place_lines(config, series: list[Series]) -> list[str]:
    """What the out-of-place group holds, per kind of session, and which series lack it."""
    if not getattr(config, "out_of_place", True):
        return ["# out-of-place: not measured (--out-of-place 0): N/A"]
    how: dict[str, list[str]] = {}
    for s in series:
        kind = s.backend.session_out_of_place()
        how.setdefault(kind or "", []).append(s.label)
    lines = []
    for kind, labels in how.items():
        names = ", ".join(labels)
        if kind:
            lines.append(f"# out-of-place ({names}): separate send and receive buffers: {kind}")
        else:
            lines.append(f"# out-of-place ({names}): N/A, the backend cannot (in place only)")
    return lines


def table_header_lines(config, series: list[Series]) -> list[str]:
    """The table's header: nccl-tests' (or OSU's with --osu), after what out of place means."""
    lines = out_of_place_lines(config, series)
    if config.osu is not None:
        place = "out of place" if getattr(config, "out_of_place", True) else "in place"
        local = [s.label for s in series if not s.backend.needs_mpirun]
        return [*lines, *osu_header(config, place, local)]
    cputime = (config.nccl_flags or {}).get("report_cputime")
    return [*lines, *table_header("cputime" if cputime else "time").split("\n")]


def _measure_group(series, sessions, group, count, start_point, output, config) -> None:
    """One size of the series in ``group``: their points loaded, timed round by round,
    finished and released."""
    points = []
    for i in group:
        series[i].select()  # what a session runs may depend on the algorithm
        points.append(start_point(sessions[i], series[i], count))
    for r, calls in enumerate(round_shares(config.iters, config.rounds)):
        for i, point in zip(group, points, strict=True):
            series[i].select()
            point.time(calls, warm=r > 0)
    for i, point in zip(group, points, strict=True):
        s = series[i]
        s.select()  # its traffic_bytes may depend on the algorithm
        row, times = point.finish()
        sessions[i].release()
        s.rows.append(row)
        s.samples.append(times)
        if config.osu is not None:
            output.line(osu_line(config, row["bytes"], point.osu_stats, s.label))
        else:
            output.line(table_line(row, s.label))
        output.step(s.label)


def sample_rows(series: list[Series]) -> list[dict]:
    """One row per timed call: the point's keys (with the variant columns that name its
    series, e.g. ``executor``), the call's index and its time."""
    keys = ("backend", "sync", "algorithm", "nodes", "dtype", "op", "bytes")
    records: list[dict] = []
    for s in series:
        for row, times in zip(s.rows, s.samples, strict=True):
            point = {key: row[key] for key in keys}
            point.update({c: row[c] for c in VARIANT_COLUMNS if row.get(c) not in (None, "")})
            records.extend(
                {**point, "call": call, "time_us": seconds * 1e6}
                for call, seconds in enumerate(times)
            )
    return records
