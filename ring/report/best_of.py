"""Our fastest against the fastest peer: at each size and N, the lowest median time of any
series of a ring backend (every algorithm, and for cpu both executors) against the lowest
of its peers', and which of ours and which peer it was.

The per-algorithm runs hold no peer (the workflow measures the peers in the ring-only
sweeps), so a pair may come from two runs of one machine; the table says which.
"""

from __future__ import annotations

import itertools

import pandas as pd

from .analysis import PEERS, RING_BACKENDS, executor_of, label_series
from .fmt import format_bytes, format_ratio
from .table import Table

__all__ = ["TITLE", "best_of_ours", "best_of_table"]

TITLE = "Our fastest against the fastest peer"

_GROUP = ["machine", "nodes", "dtype", "op"]


def _labelled(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with a drawable time, each with ``who``: its series label (machine apart, a
    column of its own here), a cpu row saying its executor either way."""
    rows = rows[(rows["bytes"] > 0) & (rows["time_us"] > 0)].copy()
    machine = rows["machine"].fillna("").astype(str) if "machine" in rows else ""
    rows = label_series(rows.drop(columns=["machine"], errors="ignore"))
    rows["machine"] = machine
    nodes = (rows["backend"] == "cpu") & (executor_of(rows) == "nodes")
    rows["who"] = rows["base"].where(~nodes, rows["base"] + " (nodes)")
    return rows


def _fastest(rows: pd.DataFrame) -> pd.DataFrame:
    """Per size: the row of the lowest median time (ties to the label first in order)."""
    ranked = rows.sort_values(["bytes", "time_us", "who"])
    return ranked.drop_duplicates("bytes").set_index("bytes")


def best_of_ours(rows: pd.DataFrame) -> pd.DataFrame:
    """Per ring backend, machine, N, dtype, op and size where both were measured: our
    fastest series and the fastest peer, their times and runs, and time(peer) / time(ours)
    (above 1: ours is faster)."""
    rows = _labelled(rows)
    records = []
    for backend in RING_BACKENDS:
        peers = [p for p in PEERS[backend] if p not in RING_BACKENDS]
        ours_all = rows[rows["backend"] == backend]
        theirs_all = rows[rows["backend"].isin(peers)]
        for key, ours in ours_all.groupby(_GROUP, sort=True):
            theirs = theirs_all[(theirs_all[_GROUP] == pd.Series(key, index=_GROUP)).all(axis=1)]
            if theirs.empty:
                continue
            mine, peer = _fastest(ours), _fastest(theirs)
            contenders = ours.groupby("bytes")["who"].nunique()
            for size in mine.index.intersection(peer.index):
                a, b = mine.loc[size], peer.loc[size]
                records.append(
                    {
                        "backend": backend,
                        **dict(zip(_GROUP, key, strict=True)),
                        "bytes": int(size),
                        "ours": a["who"],
                        "peer": b["who"],
                        "time_ours": float(a["time_us"]),
                        "time_peer": float(b["time_us"]),
                        "ratio": float(b["time_us"] / a["time_us"]),
                        "run_ours": a["run"],
                        "run_peer": b["run"],
                        "contenders": int(contenders[size]),
                    }
                )
    columns = ["backend", *_GROUP, "bytes", "ours", "peer", "time_ours", "time_peer", "ratio"]
    return pd.DataFrame.from_records(
        records, columns=[*columns, "run_ours", "run_peer", "contenders"]
    )


def _span(values: list, text) -> str:
    low, high = min(values), max(values)
    return text(low) if low == high else f"{text(low)} – {text(high)}"


def best_of_table(model) -> Table | None:
    """The pairs of :func:`best_of_ours`, consecutive sizes with the same two winners and
    the same one ahead on one row; None where no ring backend met a peer at the same size
    and N."""
    pairs = best_of_ours(model.algorithm_rows)
    if pairs.empty:
        return None
    body = []
    for key, part in pairs.groupby(["backend", *_GROUP], sort=True):
        backend, machine = key[0], key[1]
        where = f"{backend} @ {machine}" if machine else backend
        # A stretch: consecutive sizes with the same two winners, and the same one ahead.
        same = lambda r: (r.ours, r.peer, r.ratio > 1)  # noqa: E731
        for _, stretch in itertools.groupby(part.itertuples(), key=same):
            run = list(stretch)
            runs = sorted({r.run_ours for r in run}), sorted({r.run_peer for r in run})
            body.append(
                [
                    where,
                    str(key[2]),
                    _span([r.bytes for r in run], format_bytes),
                    run[0].ours,
                    run[0].peer,
                    _span([r.ratio for r in run], format_ratio),
                    _span([r.contenders for r in run], str),
                    f"ours: {', '.join(runs[0])}; peer: {', '.join(runs[1])}",
                ]
            )
    return Table(
        TITLE,
        ["backend", "N", "sizes", "our fastest", "fastest peer", "time(peer) / time(ours)",
         "ours compared", "runs"],
        body,
        "At each size and N, the lowest median time of every series of ours that was "
        "measured there (each algorithm, and for cpu each executor: (nodes) one thread per "
        "node, (slices) the plan by position) against the lowest of the peers'; above 1× "
        "ours is faster. Consecutive sizes with the same two winners, and the same one of "
        "them ahead, share a row. The "
        "algorithm runs hold no peer, so a pair may come from two runs of one machine "
        "(absolute times drift between runs); where only the ring-only sweep reached a "
        "size, fewer of ours compete there (ours compared).",
    )  # fmt: skip
