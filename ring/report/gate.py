"""The quality gate: which measured points may feed a finding.

A finding quotes a ratio as a property of the code.  It is only that where the machine was
quiet and the point is one the code, not the scheduler or a neighbour, decided.  Four rules
set points aside (they stay in every table and figure, flagged; they feed no finding):

* ``drift``: the run's memory ceilings, taken at its start and its end, differ by more than
  :data:`DRIFT_LIMIT` (the run's own recorded limit where it kept one): the whole run;
* ``above ceiling``: a series moved bytes faster than its run's memory ceiling at sizes of at
  least 4× the last-level cache, where no cache can serve them: that series at that N;
* ``oversubscribed``: more threads or ranks than usable cores, so the cores time-slice: that
  point;
* ``spread``: the same configuration measured in two runs of one machine differs by more
  than :data:`SPREAD_LIMIT` between them: that configuration, in every run.
"""

from __future__ import annotations

import math

import pandas as pd

from . import trust
from .ceilings import LLC_MULTIPLE
from .fmt import format_bytes, format_number
from .table import Table

__all__ = [
    "ABOVE_CEILING",
    "DRIFT_LIMIT",
    "RULES",
    "SPREAD_LIMIT",
    "detail_table",
    "gated",
    "passing",
    "rules_text",
    "set_aside",
    "summary_table",
    "workers_per_core",
]

DRIFT_LIMIT = 0.15
# Beyond the caches a series cannot move more bytes than the memory can: above 100 % of the
# ceiling the series and the ceiling met different load.
ABOVE_CEILING = 1.0
SPREAD_LIMIT = 0.20

RULES = {
    "drift": f"the run's memory ceilings moved by more than {DRIFT_LIMIT * 100:.0f} % between its "
    "start and its end",
    "above ceiling": f"a series ran above 100 % of its run's memory ceiling at ≥ "
    f"{LLC_MULTIPLE}× the last-level cache",
    "oversubscribed": "more threads or ranks than usable cores (the cores time-slice)",
    "spread": f"the same configuration differs by more than {SPREAD_LIMIT * 100:.0f} % "
    "between two runs",
}

# What makes two rows the same configuration (the harness's own columns).
_CONFIG = [
    "machine",
    "backend",
    "sync",
    "algorithm",
    "executor",
    "buffers",
    "nodes",
    "dtype",
    "op",
    "bytes",
    "inline_bytes",
    "graphs",
    "shared_devices",
]
_ASIDE = ["run", "machine", "backend", "nodes", "bytes", "rule", "why", "amount"]
# Backends that run one worker per node on the host's cores.
_HOST_WORKERS = ("cpu", "mpi", "mpi-allreduce", "seed-cpp")


def workers_per_core(rows: pd.DataFrame, runs) -> pd.Series:
    """Threads or ranks per usable core of each row: its own ``threads_per_core`` where the
    harness wrote one, else N over the run's usable cores for the backends that run one
    worker per node on the host (the cpu backend's slices executor runs on a crew of the
    cores' size, and numpy-direct on one thread: 0, never oversubscribed)."""
    # Threads share the cores the process may use; MPI ranks (each bound to a core by
    # mpirun, so one rank's own affinity says 1) share the hosts' cores.
    threads, ranks = {}, {}
    for run in runs:
        env = run.environment
        usable, cores = env.get("usable_cores") or env.get("cores"), env.get("cores")
        hosts = env.get("mpi_hosts") or 1
        threads[run.name] = usable if isinstance(usable, int) and usable > 0 else None
        ranks[run.name] = cores * hosts if isinstance(cores, int) and cores > 0 else None
    recorded = (
        pd.to_numeric(rows["threads_per_core"], errors="coerce")
        if "threads_per_core" in rows
        else pd.Series(math.nan, index=rows.index)
    )
    executor = rows["executor"].astype(object).fillna("").astype(str)
    derived = []
    for run, backend, nodes, how in zip(
        rows["run"], rows["backend"], rows["nodes"], executor, strict=True
    ):
        usable = (ranks if backend.startswith("mpi") else threads).get(run)
        one_per_node = backend in _HOST_WORKERS and how != "slices"
        derived.append(nodes / usable if usable and one_per_node else 0.0)
    return recorded.where(recorded.notna(), pd.Series(derived, index=rows.index))


def _drifted(model) -> list[dict]:
    aside = []
    for run in model.inputs.runs:
        moved = trust.drift(run)
        limit = trust.drift_limit(run) if moved is not None else DRIFT_LIMIT
        if moved is not None and moved > min(limit, DRIFT_LIMIT):
            aside.append(
                {
                    "run": run.name,
                    "machine": run.machine,
                    "backend": "",
                    "nodes": 0,
                    "bytes": 0,
                    "rule": "drift",
                    "why": f"memory ceilings moved {format_number(100 * moved)} % during the run",
                    "amount": moved,
                }
            )
    return aside


def _above_ceiling(model) -> list[dict]:
    fractions = model.ceiling_fractions
    if fractions.empty or "max_fraction_beyond_llc" not in fractions:
        return []
    beyond = fractions.dropna(subset=["max_fraction_beyond_llc"])
    beyond = beyond[beyond["max_fraction_beyond_llc"].astype(float) > ABOVE_CEILING]
    rows = model.rows
    aside = []
    for r in beyond.itertuples():
        mine = rows[(rows["series"] == r.series) & (rows["run"] == r.run)]
        if mine.empty:
            continue
        aside.append(
            {
                "run": r.run,
                "machine": str(mine["machine"].iloc[0]) if "machine" in mine else "",
                "backend": str(mine["backend"].iloc[0]),
                "nodes": int(r.nodes),
                "bytes": 0,
                "rule": "above ceiling",
                "why": f"{r.series}: {format_number(100 * float(r.max_fraction_beyond_llc))} % "
                f"of {r.ceiling} at {format_bytes(int(r.beyond_llc_at_bytes))}",
                "amount": float(r.max_fraction_beyond_llc),
            }
        )
    return aside


def _oversubscribed(model, rows: pd.DataFrame) -> list[dict]:
    per_core = workers_per_core(rows, model.inputs.runs)
    over = rows[per_core > 1].assign(per_core=per_core[per_core > 1])
    aside = []
    for (run, machine, backend, nodes), part in over.groupby(
        ["run", "machine", "backend", "nodes"], sort=True
    ):
        aside.append(
            {
                "run": run,
                "machine": machine,
                "backend": backend,
                "nodes": int(nodes),
                "bytes": 0,
                "rule": "oversubscribed",
                "why": f"{backend} N={nodes}: {format_number(part['per_core'].max())} workers "
                "per core",
                "amount": float(part["per_core"].max()),
            }
        )
    return aside


def _spread(rows: pd.DataFrame) -> list[dict]:
    keys = [c for c in _CONFIG if c in rows]
    frame = rows[rows["time_us"] > 0].copy()
    for key in keys:
        frame[key] = frame[key].astype(object).where(frame[key].notna(), "")
    aside = []
    for key, part in frame.groupby(keys, sort=True):
        if part["run"].nunique() < 2:
            continue
        medians = part.groupby("run")["time_us"].median()
        spread = medians.max() / medians.min() - 1
        if spread <= SPREAD_LIMIT:
            continue
        config = dict(zip(keys, key, strict=True))
        for run in medians.index:
            aside.append(
                {
                    "run": run,
                    "machine": config.get("machine", ""),
                    "backend": config["backend"],
                    "nodes": int(config["nodes"]),
                    "bytes": int(config["bytes"]),
                    "rule": "spread",
                    "why": f"{_named(config)} N={config['nodes']} at "
                    f"{format_bytes(int(config['bytes']))}: "
                    f"{format_number(medians.min())}–{format_number(medians.max())} µs "
                    f"across runs {', '.join(sorted(medians.index))}",
                    "amount": float(spread),
                }
            )
    return aside


def _named(config: dict) -> str:
    algorithm = str(config.get("algorithm") or "")
    backend = str(config["backend"])
    return backend if algorithm in ("", backend) else f"{backend} {algorithm}"


def set_aside(model) -> pd.DataFrame:
    """One row per thing the gate sets aside: run, machine, backend ("" = every backend),
    nodes (0 = every N), bytes (0 = every size), the rule and why, with its numbers."""
    rows = model.algorithm_rows
    if "machine" not in rows:
        rows = rows.assign(machine="")
    rows = rows.assign(machine=rows["machine"].astype(object).fillna("").astype(str))
    records = [
        *_drifted(model),
        *_above_ceiling(model),
        *_oversubscribed(model, rows),
        *_spread(rows),
    ]
    return pd.DataFrame.from_records(records, columns=_ASIDE)


def gated(rows: pd.DataFrame, aside: pd.DataFrame) -> pd.Series:
    """For each row: the rules that set it aside, joined ("" where it passes)."""
    reasons: list[list[str]] = [[] for _ in range(len(rows))]
    for a in aside.itertuples():
        hit = (rows["run"] == a.run).to_numpy().copy()
        if a.backend:
            hit &= (rows["backend"] == a.backend).to_numpy()
        if a.nodes:
            hit &= (rows["nodes"] == a.nodes).to_numpy()
        if a.bytes:
            hit &= (rows["bytes"] == a.bytes).to_numpy()
        for i in hit.nonzero()[0]:
            if a.rule not in reasons[i]:
                reasons[i].append(a.rule)
    return pd.Series([", ".join(r) for r in reasons], index=rows.index, dtype=object)


def passing(rows: pd.DataFrame, aside: pd.DataFrame) -> pd.Series:
    """True for rows no rule sets aside."""
    return gated(rows, aside) == ""


def rules_text() -> list[str]:
    return [f"**{name}**: {text}" for name, text in RULES.items()]


def _where(a) -> str:
    backend = a.backend or "every backend"
    nodes = f"N = {a.nodes}" if a.nodes else "every N"
    on = f" @ {a.machine}" if a.machine else ""
    return f"{backend}, {nodes}{on}"


def summary_table(aside: pd.DataFrame) -> Table:
    """One row per rule, machine, backend and N: which runs, how many sizes, the worst case
    (a spread names both runs once)."""
    body = []
    for _, part in aside.groupby(["rule", "machine", "backend", "nodes"], sort=True):
        worst = part.loc[part["amount"].idxmax()]
        sizes = part["bytes"][part["bytes"] > 0].drop_duplicates()
        if sizes.empty:
            span = "every size"
        else:
            low, high = format_bytes(sizes.min()), format_bytes(sizes.max())
            span = f"{len(sizes)} sizes, {low}–{high}" if len(sizes) > 1 else low
        runs = ", ".join(sorted(set(part["run"])))
        body.append([str(worst["rule"]), runs, _where(worst), span, str(worst["why"])])
    return Table(
        "Set aside by the quality gate",
        ["rule", "runs", "what", "sizes", "worst case"],
        body,
    )


def detail_table(aside: pd.DataFrame) -> Table:
    body = [
        [a.rule, a.run, _where(a), format_bytes(a.bytes) if a.bytes else "every size", a.why]
        for a in aside.itertuples()
    ]
    return Table(
        "Set aside by the quality gate, point by point",
        ["rule", "run", "what", "size", "why"],
        body,
    )
