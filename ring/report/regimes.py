"""The report's first screen: which of our algorithms to use where, against the best peer
of the same run, and why; and the core table of each backend and N.

Everything here compares two series of **one run** (one launch, one machine): at each size,
our fastest series (every algorithm, sync and executor of the ring backend) against the
fastest peer (:data:`~ring.report.analysis.PEERS`) measured beside it.  The ratio is
``time(peer) / time(ours)`` (above 1: ours is faster) with a 95 % bootstrap interval from the
timed calls (``FILE.samples.csv``), or, for runs that kept no calls, the band the two
interquartile ranges span.  A size where any contender is set aside by the quality gate
(:mod:`ring.report.gate`) gives no ratio to a finding; a regime is a run of at least
:data:`MIN_SIZES` consecutive sizes where the same series of ours wins, or the same loses,
with the interval clear of 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model.bootstrap import bootstrap_ratio
from .analysis import PEERS, PLAIN, RING_BACKENDS
from .best_of import _labelled
from .fmt import format_bytes, format_number, format_ratio
from .gate import gated
from .intervals import SEED, samples_of
from .table import Table

__all__ = [
    "KEY",
    "MAX_FINDINGS",
    "MIN_SIZES",
    "Regime",
    "core_tables",
    "findings",
    "points",
    "regimes",
    "scope",
]

MAX_FINDINGS = 6
MIN_SIZES = 2
# Main-report core tables show sizes a factor of this apart (the appendix shows every size).
MAIN_STEP = 4

KEY = ["run", "machine", "backend", "nodes", "dtype", "op"]
_KEY = KEY
_SAMPLE_KEYS = ["backend", "sync", "nodes", "bytes", "algorithm", "dtype", "op", "executor"]
_SAMPLE_KEYS += ["inline_bytes", "graphs", "buffers"]


def _calls(samples: pd.DataFrame, row: pd.Series) -> np.ndarray:
    mask = np.ones(len(samples), dtype=bool)
    for key in _SAMPLE_KEYS:
        if key not in samples.columns or key not in row.index:
            continue
        value = row[key]
        column = samples[key]
        mask &= (column.isna() if pd.isna(value) else column == value).to_numpy()
    return samples.loc[mask, "time_us"].to_numpy()


def points(model) -> pd.DataFrame:
    """One row per run, ring backend, N, dtype/op and size where ours and a peer of the same
    run were both measured: our fastest and the fastest peer, their times, the ratio, its
    interval and how it was drawn, and the gate's rules for the point ("" where it passes)."""
    rows = model.algorithm_rows
    rows = rows.assign(gate=gated(rows, model.gate))
    rows = _labelled(rows)
    runs = {run.name: run for run in model.inputs.runs}
    rng = np.random.default_rng(SEED)
    records = []
    for backend in RING_BACKENDS:
        peers = [p for p in PEERS[backend] if p not in RING_BACKENDS]
        for key, part in rows[rows["backend"].isin([backend, *peers])].groupby(
            ["run", "machine", "nodes", "dtype", "op"], sort=True
        ):
            run, machine, nodes, dtype, op = key
            samples = samples_of(runs[run]) if run in runs else None
            for size, at in part.groupby("bytes", sort=True):
                ours = at[at["backend"] == backend].sort_values(["time_us", "who"])
                theirs = at[at["backend"].isin(peers)].sort_values(["time_us", "who"])
                if ours.empty or theirs.empty:
                    continue
                mine, peer = ours.iloc[0], theirs.iloc[0]
                # The plain ring's label is its backend's: name the algorithm.
                name = str(mine["who"])
                if str(mine["algorithm"]) not in name:
                    name = name.replace(backend, f"{backend} {mine['algorithm']}", 1)
                low = high = math.nan
                how = "IQR band"
                if samples is not None:
                    fast, slow = _calls(samples, mine), _calls(samples, peer)
                    if len(fast) and len(slow):
                        low, high = bootstrap_ratio(fast, slow, rng)
                        how = "95 % CI"
                if math.isnan(low):
                    low = peer["time_us_p25"] / mine["time_us_p75"]
                    high = peer["time_us_p75"] / mine["time_us_p25"]
                rules = sorted({r for g in at["gate"] for r in g.split(", ") if r})
                records.append(
                    {
                        "run": run,
                        "machine": machine,
                        "backend": backend,
                        "nodes": int(nodes),
                        "dtype": dtype,
                        "op": op,
                        "bytes": int(size),
                        "ours": name,
                        "peer": peer["who"],
                        "time_ours": float(mine["time_us"]),
                        "time_peer": float(peer["time_us"]),
                        "traffic_ours": float(mine.get("traffic_GBps", math.nan)),
                        "traffic_peer": float(peer.get("traffic_GBps", math.nan)),
                        "ratio": float(peer["time_us"] / mine["time_us"]),
                        "low": float(low),
                        "high": float(high),
                        "interval": how,
                        "gate": ", ".join(rules),
                    }
                )
    columns = [*_KEY[:4], "dtype", "op", "bytes", "ours", "peer", "time_ours", "time_peer"]
    columns += ["traffic_ours", "traffic_peer", "ratio", "low", "high", "interval", "gate"]
    return pd.DataFrame.from_records(records, columns=columns)


@dataclass(frozen=True)
class Regime:
    """Consecutive sizes of one run, backend and N where one series of ours wins (or loses)
    against the fastest peer with the interval clear of 1."""

    key: tuple
    wins: bool
    ours: str
    stretch: pd.DataFrame  # the points, ascending size

    @property
    def run(self) -> str:
        return str(self.key[0])

    @property
    def machine(self) -> str:
        return str(self.key[1])

    @property
    def backend(self) -> str:
        return str(self.key[2])

    @property
    def nodes(self) -> int:
        return int(self.key[3])

    @property
    def sizes(self) -> int:
        return len(self.stretch)


def regimes(table: pd.DataFrame) -> list[Regime]:
    """Every regime of at least :data:`MIN_SIZES` sizes among the gate-passing points."""
    found = []
    for key, part in table.groupby(_KEY, sort=True):
        part = part.sort_values("bytes").reset_index(drop=True)
        state: list[tuple[str, bool] | None] = []
        for r in part.itertuples():
            if r.gate or not (r.low > 1 or r.high < 1):
                state.append(None)
            elif r.low > 1:
                state.append((r.ours, True))  # which of ours wins is the action
            else:
                state.append(("", False))  # the action is the peer, whichever of ours lost
        start = 0
        for i in range(1, len(state) + 1):
            if i < len(state) and state[i] == state[start]:
                continue
            current = state[start]
            if current is not None and i - start >= MIN_SIZES:
                stretch = part.iloc[start:i]
                ours, wins = current
                ours = ours or " / ".join(sorted(set(stretch["ours"])))
                found.append(Regime(key, wins, ours, stretch))
            start = i
    return found


def _span(stretch: pd.DataFrame) -> str:
    return f"{format_bytes(stretch['bytes'].min())}–{format_bytes(stretch['bytes'].max())}"


def _where(regime: Regime) -> str:
    on = f" on {regime.machine}" if regime.machine else ""
    return f"{regime.backend}, N = {regime.nodes}{on}"


def _reason(regime: Regime) -> str:
    """Why: how the time of ours grows with size over the regime (the cost model's α or β
    term decides), and the bytes each side moves through memory where both recorded it."""
    s = regime.stretch
    first, last = s.iloc[0], s.iloc[-1]
    size_growth = last["bytes"] / first["bytes"]
    growth = last["time_ours"] / first["time_ours"]
    if growth < math.sqrt(size_growth):
        return (
            f"latency-bound: its time grows only {format_ratio(growth)} over this "
            f"{format_ratio(size_growth)} range of sizes, so the fixed cost per step and per "
            "call (the cost model's α: synchronisation, launches), not the bytes, decides"
        )
    moved_ours = last["traffic_ours"] * last["time_ours"] * 1e3 / last["bytes"]
    moved_peer = last["traffic_peer"] * last["time_peer"] * 1e3 / last["bytes"]
    text = (
        f"bandwidth-bound: its time grows {format_ratio(growth)} for "
        f"{format_ratio(size_growth)} the bytes (the cost model's β term)"
    )
    if np.isfinite(moved_ours) and np.isfinite(moved_peer) and moved_ours > 0 and moved_peer > 0:
        text += (
            f", and at {format_bytes(last['bytes'])} it moves {format_number(moved_ours)}·S "
            f"through memory against {last['peer']}'s {format_number(moved_peer)}·S"
        )
    return text


def _sentence(regime: Regime) -> str:
    s = regime.stretch
    # The weakest point of the regime: the ratio closest to 1, with its interval.
    weakest = s.loc[(s["ratio"].apply(math.log).abs()).idxmin()]
    peers = ", ".join(sorted(set(s["peer"])))
    if regime.wins:
        low, high = s["ratio"].min(), s["ratio"].max()
        interval = f"{format_ratio(weakest['low'])}–{format_ratio(weakest['high'])}"
        return (
            f"**{_where(regime)}, {_span(s)}: use our `{regime.ours}`.** It is "
            f"{format_ratio(low)}–{format_ratio(high)} faster than the fastest peer of the "
            f"same run ({peers}; weakest at {format_bytes(weakest['bytes'])}: "
            f"{format_ratio(weakest['ratio'])}, {weakest['interval']} {interval}; "
            f"run {regime.run}). Why: {_reason(regime)}."
        )
    slow, fast = 1 / s["ratio"].max(), 1 / s["ratio"].min()
    interval = f"{format_ratio(1 / weakest['high'])}–{format_ratio(1 / weakest['low'])}"
    names = ", ".join(f"`{name}`" for name in regime.ours.split(" / "))
    return (
        f"**{_where(regime)}, {_span(s)}: use {peers}, not our ring.** Our fastest there "
        f"({names}) takes {format_ratio(slow)}–{format_ratio(fast)} as long "
        f"(closest at {format_bytes(weakest['bytes'])}: {format_ratio(1 / weakest['ratio'])}, "
        f"{weakest['interval']} {interval}; run {regime.run}). Why: {_reason(regime)}."
    )


def _ours_measured(rows: pd.DataFrame) -> dict[tuple, int]:
    """(run, machine, backend, N) -> how many series of ours the run measured there."""
    ours = _labelled(rows[rows["backend"].isin(RING_BACKENDS)])
    return ours.groupby(["run", "machine", "backend", "nodes"])["who"].nunique().to_dict()


def _richest(found: list[Regime], measured: dict[tuple, int]) -> list[Regime]:
    """The regimes of the run, of each machine, backend and N, that measured the most
    series of ours (ties: every such run): a ring-only sweep's "our fastest" is the plain
    ring, and where an algorithm run set more of ours against the peers, it speaks."""

    def count(r: Regime) -> int:
        return measured.get((r.run, r.machine, r.backend, r.nodes), 0)

    most: dict[tuple, int] = {}
    for r in found:
        where = (r.machine, r.backend, r.nodes)
        most[where] = max(most.get(where, 0), count(r))
    return [r for r in found if count(r) == most[(r.machine, r.backend, r.nodes)]]


def findings(model) -> list[str]:
    """Up to :data:`MAX_FINDINGS` sentences: of each machine, backend and N, the regimes
    of the run that measured the most series of ours; the longest regime of each run,
    backend and N first, then the others, longest first, this machine's before
    references; shown by machine, backend, N and size."""
    found = regimes(model.regime_points)
    if not found:
        return []
    found = _richest(found, _ours_measured(model.algorithm_rows))
    # This machine's runs speak first; a reference from another machine adds a finding
    # only for a backend and N this machine did not measure beside a peer.
    here = {(r.backend, r.nodes) for r in found if not r.machine}
    found = [r for r in found if not r.machine or (r.backend, r.nodes) not in here]
    ranked = sorted(found, key=lambda r: (-r.sizes, r.key, not r.wins))
    tier: dict[int, int] = {}
    seen: set[tuple] = set()
    for r in ranked:
        tier[id(r)] = int(r.key in seen)  # 0: the longest regime of its run, backend and N
        seen.add(r.key)
    ranked.sort(key=lambda r: (bool(r.machine), tier[id(r)]))  # stable: longest first within
    chosen = ranked[:MAX_FINDINGS]
    chosen.sort(key=lambda r: (r.machine, r.backend, r.nodes, r.stretch["bytes"].min()))
    return [_sentence(r) for r in chosen]


def _plain(rows: pd.DataFrame, backend: str) -> pd.DataFrame:
    """The plain ring of a backend, one row per size: its default sync and executor."""
    ring = rows[(rows["backend"] == backend) & (rows["algorithm"] == PLAIN)]
    if "executor" in ring:
        ring = ring[ring["executor"].astype(object).fillna("").astype(str) != "slices"]
    order = {"pairwise": 0, "none": 1}
    ring = ring.assign(_order=ring["sync"].map(order).fillna(2))
    return ring.sort_values(["bytes", "_order"]).drop_duplicates("bytes").set_index("bytes")


def core_tables(model, *, every_size: bool) -> list[Table]:
    """One table per run, ring backend and N, nccl-tests style (all from that run)."""
    table = model.regime_points
    rows = model.algorithm_rows
    tables = []
    for key, part in table.groupby(_KEY, sort=True):
        run, machine, backend, nodes, dtype, op = key
        part = part.sort_values("bytes")
        if not every_size:
            steps = (part["bytes"] / part["bytes"].min()).apply(math.log, args=(MAIN_STEP,))
            keep = steps.round(9)
            part = part[(keep == keep.round()) | (part["bytes"] == part["bytes"].max())]
        plain = _plain(rows[(rows["run"] == run) & (rows["nodes"] == nodes)], backend)
        body = []
        for r in part.itertuples():
            ring = plain.loc[r.bytes] if r.bytes in plain.index else None
            body.append(
                [
                    format_bytes(r.bytes),
                    format_number(ring["time_us"]) if ring is not None else "–",
                    format_number(ring["algbw_GBps"]) if ring is not None else "–",
                    format_number(ring["busbw_GBps"]) if ring is not None else "–",
                    r.ours,
                    format_number(r.time_ours),
                    r.peer,
                    format_number(r.time_peer),
                    f"{format_ratio(r.ratio)} ({format_ratio(r.low)}–{format_ratio(r.high)})",
                    r.gate or "pass",
                ]
            )
        on = f" on {machine}" if machine else ""
        kinds = "" if dtype == "float32" and op == "sum" else f", {dtype} {op}"
        intervals = sorted(set(part["interval"]))
        # fmt: off
        tables.append(
            Table(
                f"{backend}, N = {nodes}{on}{kinds} (run {run})",
                [
                    "size",
                    "ring time (µs)",
                    "algbw (GB/s)",
                    "busbw (GB/s)",
                    "our fastest",
                    "time (µs)",
                    "fastest peer",
                    "time (µs)",
                    "peer / ours (interval)",
                    "gate",
                ],
                body,
                f"Median times of one run; interval: {', '.join(intervals)}; above 1× ours is "
                "faster."
                + ("" if every_size else f" Sizes {MAIN_STEP}× apart; every size in the appendix."),
            )
        )
        # fmt: on
    return tables


def scope(model) -> str:
    """What the runs measured and, plainly, what they did not: a ring across distinct GPUs
    (the links the original study measured) and NCCL."""
    rows = model.algorithm_rows
    parts = []
    for backend in sorted(set(rows["backend"])):
        mine = rows[rows["backend"] == backend]
        where = sorted({str(m) for m in mine.get("machine", pd.Series([""])).fillna("") if m})
        local = (mine.get("machine", pd.Series([""])).fillna("") == "").any()
        machines = (["this machine"] if local else []) + where
        shared = backend == "gpu" and bool(mine["shared_devices"].astype(bool).all())
        parts.append(
            f"{backend}{' (N logical nodes on one device)' if shared else ''} "
            f"on {', '.join(machines)}"
        )
    gpus = rows[rows["backend"] == "gpu"]
    distinct = not gpus.empty and not bool(gpus["shared_devices"].astype(bool).all())
    missing = []
    if not distinct:
        missing.append("no ring across distinct GPUs (no link was measured)")
    if "nccl" not in set(rows["backend"]):
        missing.append("no NCCL")
    text = f"**Scope.** Measured: {'; '.join(parts)}."
    if missing:
        text += (
            f" These runs hold {' and '.join(missing)}, so no finding speaks for the "
            "multi-GPU links the original study measured."
        )
    return text
