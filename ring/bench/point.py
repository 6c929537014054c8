"""One size of one series: loaded once, its timed calls taken in one or more slices
(``--rounds``: one slice per round, every series in turn), its row made once all of them
are in.

The ``-w`` warm-up calls run just before the first timed ones.  With ``--rounds`` every
series of a size is loaded before the first round; warming each up there would leave the
other series' loads and warm-ups between its warm-up and its first timed call, and the
first round's calls slower than the later rounds' (docs/notes/bench-rounds-warmup.md).

Each in-place call is timed after an untimed restore of the inputs; with ``-c`` the sampled
windows of the checked calls and every element after the last call are compared with a
wide NumPy reference.  Unless ``--out-of-place 0``, each slice first times as many
out-of-place calls (nccl-tests' order: out of place, then in place), checked alike: the
session's :meth:`~ring.bench.backends.Session.timed_out_of_place`, which needs no restore.
A round after the first opens with one untimed call, so what the
other series' rounds evicted from the caches is not charged to this one's first call.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import numpy as np

from . import data
from .algorithms import RESOLVED_COLUMN, resolved_columns
from .backends import Session
from .nccl_compat import OOP_KEYS, rank_mean_stats, should_check
from .results import make_row

# At most this many untimed calls let auto finish planning before its timed calls (a trial
# ends well before: candidates x repeats, or its budget of seconds).
PLANNING_CALLS = 1000

if TYPE_CHECKING:
    from .series import Series

__all__ = ["Point", "round_shares"]


def round_shares(iters: int, rounds: int) -> list[int]:
    """Timed calls per round: ``iters`` split as evenly as it goes, the first rounds
    taking one more."""
    base, extra = divmod(iters, rounds)
    return [base + (r < extra) for r in range(rounds)]


class Point:
    def __init__(self, session: Session, series: Series, count: int, plan) -> None:
        self.session, self.series, self.count, self.plan = session, series, count, plan
        config, world = plan.config, plan.world
        nodes = series.nodes
        self.local_nodes = [world.rank] if series.backend.needs_mpirun else list(range(nodes))
        self.inputs = [
            data.make_input(config.seed, nodes, count, config.dtype, node)
            for node in self.local_nodes
        ]
        session.load(self.inputs)
        self.windows = data.sample_windows(config.seed, count) if config.check else None
        self.done = 0
        # Out of place too, where the run asks for it and the session can.
        self.out_of_place = getattr(config, "out_of_place", True) and (
            session.out_of_place is not None
        )
        # Per timed call in the order made: True out of place, False in place.
        self.places: list[bool] = []
        # The windows kept after each checked call, in place and out of place.
        self.samples: list = []
        self.oop_samples: list = []
        self.oop_last_wrong: int | None = None
        self._expected = None
        # OSU's figures of the place it reports (min/avg/max over ranks of each rank's
        # mean, microseconds), set by finish.
        self.osu_stats: dict[str, float] = {}

    def time(self, calls: int, warm: bool = False) -> None:
        """The next ``calls`` timed calls: the first after the ``-w`` warm-up calls, a later
        slice after one untimed call when ``warm``."""
        config, session = self.plan.config, self.session
        for _ in range(config.warmup if self.done == 0 else int(warm)):
            session.restore()
            session.call()
        # auto measures its candidates on its first calls of a shape: those are planning,
        # counted in the run's JSON (planning), not timed as what auto costs once planned.
        for _ in range(PLANNING_CALLS if self.done == 0 else 0):
            if not session.planning():
                break
            session.restore()
            session.call()
        # A collection pause inside a timed call would be charged to the backend.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if self.out_of_place:
                for call in range(self.done, self.done + calls):
                    session.timed_out_of_place()
                    self.places.append(True)
                    self._check_out_of_place(call)
            for call in range(self.done, self.done + calls):
                session.restore()
                session.timed_call()
                self.places.append(False)
                if self.windows is not None and should_check(config.check, call, config.iters):
                    session.keep_sample(self.windows)
                    self.samples += session.take_samples()
        finally:
            if gc_was_enabled:
                gc.enable()
        self.done += calls

    def expected(self):
        """The wide reference of this point's result (computed once, on first need)."""
        if self._expected is None:
            config = self.plan.config
            known = dict(zip(self.local_nodes, self.inputs, strict=True))
            self._expected = data.reference(
                config.seed, self.series.nodes, self.count, config.dtype, config.op, known
            )
        return self._expected

    def _check_out_of_place(self, call: int) -> None:
        """After out-of-place call ``call``: keep its windows when -c checks it, and after
        the last one count every wrong element (the in-place calls overwrite them next)."""
        config, session = self.plan.config, self.session
        if self.windows is None or not should_check(config.check, call, config.iters):
            return
        session.keep_sample(self.windows)
        self.oop_samples += session.take_samples()
        if call == config.iters - 1:
            rtol = data.tolerance(config.dtype, self.series.nodes)
            self.oop_last_wrong = data.count_wrong_all(session.results(), self.expected(), rtol)

    def finish(self) -> tuple[dict, list]:
        """The point's CSV row and the seconds of each timed in-place call."""
        config, world, series = self.plan.config, self.plan.world, self.series
        backend, nodes, count = series.backend, series.nodes, self.count
        every = self.session.times()
        places = np.asarray(self.places, dtype=bool)
        if len(every) != len(places) or self.done != config.iters:
            raise RuntimeError(
                f"backend {backend.name} reported {len(every)} times for {len(places)} calls"
            )
        times = [t for t, out in zip(every, places, strict=True) if not out]
        oop_times = [t for t, out in zip(every, places, strict=True) if out]
        wrong = oop_wrong = None
        if self.windows is not None:
            wrong = world.sum_int(self._count_wrong(self.expected(), self.windows))
            if self.out_of_place:
                oop_wrong = world.sum_int(self._count_oop_wrong())
        nbytes = count * config.dtype.itemsize
        extras = self.session.row_extras()
        extras.update(self._rank_statistics(places, times, oop_times))
        resolved = {}
        if RESOLVED_COLUMN not in extras:  # the session did not say what auto ran
            resolved = resolved_columns(
                backend.name, series.algorithm, nodes, nbytes, extras.get("inline_bytes")
            )
        common = dict(
            backend=backend.name,
            sync=series.sync,
            algorithm=series.algorithm,
            nodes=nodes,
            dtype=config.dtype,
            op=config.op,
            nbytes=nbytes,
            count=count,
            traffic_bytes=backend.traffic_bytes(nbytes, nodes),
            shared_devices=self.session.shared_devices,
        )
        row = make_row(**common, times_s=times, wrong=wrong, extras={**extras, **resolved})
        out_of_place = dict.fromkeys(OOP_KEYS)
        if oop_times:
            out_of_place = make_row(**common, times_s=oop_times, wrong=oop_wrong)
        row.update({f"oop_{key}": out_of_place[key] for key in OOP_KEYS})
        return row, times

    def _rank_statistics(self, places, times, oop_times) -> dict[str, float]:
        """OSU's -f figures: of the in-place calls (CSV ``rank_mean_us_*``, MPI rows only)
        and the out-of-place ones (``oop_rank_mean_us_*``); ``osu_stats`` gets those of the
        calls OSU's allreduce makes, out of place where measured.  One process timing every
        node's call at once is one rank: its min, average and max are its mean."""
        ranks = self.session.rank_times()
        stats: dict[str, float] = {}
        if ranks is not None:
            stats.update(rank_mean_stats(ranks[:, ~places]))
            if oop_times:
                oop = rank_mean_stats(ranks[:, places])
                stats.update({f"oop_{key}": value for key, value in oop.items()})
        chosen = "oop_" if oop_times else ""
        if ranks is None:
            local = rank_mean_stats(np.asarray([oop_times or times]))
            self.osu_stats = {key.rsplit("_", 1)[1]: value for key, value in local.items()}
        else:
            self.osu_stats = {
                key.rsplit("_", 1)[1]: stats[f"{chosen}{key}"]
                for key in ("rank_mean_us_min", "rank_mean_us_avg", "rank_mean_us_max")
            }
        return stats

    def _count_oop_wrong(self) -> int:
        """Out of place: every element after the last call, the windows of the others."""
        config = self.plan.config
        rtol = data.tolerance(config.dtype, self.series.nodes)
        in_windows = data.gather_windows(self.expected(), self.windows or [])
        wrong = self.oop_last_wrong or 0
        for sample in self.oop_samples[:-1]:
            wrong = max(wrong, data.count_wrong_all(sample, in_windows, rtol))
        return wrong

    def _count_wrong(self, expected, windows: list[tuple[int, int]]) -> int:
        """Wrong elements of this process's nodes: every element after the last call, and
        the sampled windows after each earlier checked one (-c N: every N-th; the worst
        call counts)."""
        config, session = self.plan.config, self.session
        rtol = data.tolerance(config.dtype, self.series.nodes)
        results = session.results()
        samples = self.samples
        checked = sum(
            should_check(config.check, call, config.iters) for call in range(config.iters)
        )
        if len(samples) != checked or any(len(s) != len(results) for s in samples):
            raise RuntimeError(f"backend {session!r} kept samples that do not match its calls")
        wrong = data.count_wrong_all(results, expected, rtol)
        in_windows = data.gather_windows(expected, windows)
        for sample in samples[:-1]:
            wrong = max(wrong, data.count_wrong_all(sample, in_windows, rtol))
        return wrong
