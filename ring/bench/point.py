"""One size of one series: loaded once, its timed calls taken in one or more slices
(``--rounds``: one slice per round, every series in turn), its row made once all of them
are in.

The ``-w`` warm-up calls run just before the first timed ones.  With ``--rounds`` every
series of a size is loaded before the first round; warming each up there would leave the
other series' loads and warm-ups between its warm-up and its first timed call, and the
first round's calls slower than the later rounds' (docs/notes/bench-rounds-warmup.md).

Each call is timed after an untimed restore of the inputs; with ``-c`` the sampled
windows of the checked calls and every element after the last call are compared with a
wide NumPy reference.  A round after the first opens with one untimed call, so what the
other series' rounds evicted from the caches is not charged to this one's first call.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from . import data
from .algorithms import resolved_columns
from .backends import Session
from .nccl_compat import should_check
from .results import make_row

if TYPE_CHECKING:
    from .interleave import Series

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

    def time(self, calls: int, warm: bool = False) -> None:
        """The next ``calls`` timed calls: the first after the ``-w`` warm-up calls, a later
        slice after one untimed call when ``warm``."""
        config, session = self.plan.config, self.session
        for _ in range(config.warmup if self.done == 0 else int(warm)):
            session.restore()
            session.call()
        # A collection pause inside a timed call would be charged to the backend.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for call in range(self.done, self.done + calls):
                session.restore()
                session.timed_call()
                if self.windows is not None and should_check(config.check, call, config.iters):
                    session.keep_sample(self.windows)
        finally:
            if gc_was_enabled:
                gc.enable()
        self.done += calls

    def finish(self) -> tuple[dict, list]:
        """The point's CSV row and the seconds of each timed call."""
        config, world, series = self.plan.config, self.plan.world, self.series
        backend, nodes, count = series.backend, series.nodes, self.count
        times = self.session.times()
        if len(times) != config.iters or self.done != config.iters:
            raise RuntimeError(
                f"backend {backend.name} reported {len(times)} times for {config.iters} calls"
            )
        wrong = None
        if self.windows is not None:
            known = dict(zip(self.local_nodes, self.inputs, strict=True))
            expected = data.reference(config.seed, nodes, count, config.dtype, config.op, known)
            wrong = world.sum_int(self._count_wrong(expected, self.windows))
        nbytes = count * config.dtype.itemsize
        extras = self.session.row_extras()
        resolved = resolved_columns(
            backend.name, series.algorithm, nodes, nbytes, extras.get("inline_bytes")
        )
        row = make_row(
            backend=backend.name,
            sync=series.sync,
            algorithm=series.algorithm,
            nodes=nodes,
            dtype=config.dtype,
            op=config.op,
            nbytes=nbytes,
            count=count,
            times_s=times,
            traffic_bytes=backend.traffic_bytes(nbytes, nodes),
            wrong=wrong,
            shared_devices=self.session.shared_devices,
            extras={**extras, **resolved},
        )
        return row, times

    def _count_wrong(self, expected, windows: list[tuple[int, int]]) -> int:
        """Wrong elements of this process's nodes: every element after the last call, and
        the sampled windows after each earlier checked one (-c N: every N-th; the worst
        call counts)."""
        config, session = self.plan.config, self.session
        rtol = data.tolerance(config.dtype, self.series.nodes)
        results = session.results()
        samples = session.take_samples()
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
