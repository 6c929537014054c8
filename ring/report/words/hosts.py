"""The section across emulated hosts in words and tables: what an emulated host is and is
not, the model's two levels fitted per link rate, and its prediction beside every measured
time. Every number is read from the model's file (python -m ring.model hosts), which reads
it from the runs and their recorded conditions."""

from __future__ import annotations

from ..derive.hosts import RateCheck, rate_checks
from ..load.hosts import HostsModel
from .fmt import format_bytes, format_number, format_ratio
from .table import Table

__all__ = ["hosts_section"]

SERIES = {"mpi": "our ring", "mpi-allreduce": "MPI_Allreduce"}
FITTED = {"net": "fitted: the link", "shm": "fitted: shared memory", "": "predicted"}


def _ranks(row: dict) -> str:
    per_host = str(row["per_host"])
    if not row["oversubscribed"]:
        return per_host
    ranks = int(row["per_host"]) * int(row["hosts"])
    return f"{per_host}, oversubscribed ({ranks} ranks on {row['cores']} cores)"


def _series(row: dict) -> str:
    if row["backend"] == "mpi-allreduce":
        return SERIES["mpi-allreduce"]
    name = f"{SERIES.get(row['backend'], row['backend'])}, {row['algorithm']}"
    return name if row["resolved"] == row["algorithm"] else f"{name} (ran {row['resolved']})"


def _row(row: dict) -> list[str]:
    predicted = row["predicted_us"]
    return [
        format_bytes(int(row["nbytes"])),
        _ranks(row),
        _series(row),
        format_number(float(row["measured_us"])),
        "none" if predicted is None else format_number(float(predicted)),
        "" if row["ratio"] is None else format_ratio(float(row["ratio"])),
        "" if predicted is None else FITTED[row["fitted"]],
    ]


def _rate_table(model: HostsModel, check: RateCheck) -> Table:
    rate = check.level["rate"]
    rows = [r for r in model.rows if r["rate"] == rate]
    rows.sort(key=lambda r: (int(r["per_host"]), int(r["nbytes"]), r["backend"], r["algorithm"]))
    peer = next((r["why_none"] for r in rows if r["predicted_us"] is None), "")
    return Table(
        f"At {rate} each way: measured and predicted, per size",
        ["size", "ranks per host", "series", "measured µs", "predicted µs", "pred / meas", ""],
        [_row(r) for r in rows],
        note=f"MPI_Allreduce has no prediction: {peer}." if peer else "",
    )


def _spread(spread: tuple[float, float] | None) -> str:
    if spread is None:
        return "none"
    return f"{format_ratio(spread[0])} to {format_ratio(spread[1])}"


def _level_row(check: RateCheck) -> list[str]:
    level = check.level
    link = level.get("link_GBps")
    shm = (
        f"{format_number(level['alpha_shm_s'] * 1e6)} µs, "
        f"{format_number(level['beta_shm_s_per_B'] * 1e12)} ps/B"
        + (" (oversubscribed rows)" if level["shm_oversubscribed"] else "")
        if level["shm_fitted"]
        else "no row with several ranks per host"
    )
    return [
        f"{level['rate']} ({format_number(level['rate_GBps'])} GB/s)",
        f"{format_number(level['alpha_net_s'] * 1e6)} µs",
        f"{format_number(level['beta_net_s_per_B'] * 1e12)} ps/B"
        + (f" ({format_number(link)} GB/s)" if link else ""),
        shm,
        f"{level['net_rows']} + {level['shm_rows']}",
        _spread(check.fitted),
        f"{_spread(check.unseen)} ({check.unseen_rows} rows)",
    ]


def _what(model: HostsModel) -> list[str]:
    """What an emulated host is and is not, in the numbers of these runs."""
    first = model.rows[0]
    rates = ", ".join(level["rate"] for level in model.levels)
    crowded = [r for r in model.rows if r["oversubscribed"]]
    sentences = [
        f"An emulated host is a network, UTS, IPC and mount namespace on this one machine "
        f"(`scripts/hosts.sh`): {first['hosts']} hosts, each with its own hostname and "
        "`/dev/shm`, joined by veth pairs to one bridge. Open MPI sees separate nodes: its "
        "shared-memory transport stays within a host, and every message between hosts is "
        "real TCP through the kernel.",
        f"It is not a machine of its own: every host shares this machine's {first['cores']} "
        "cores, memory and file system.",
        f"Each link is rate-limited by tc's token bucket (tbf) at {rates}, each way. No "
        "latency is added (netem's delay is unavailable here): a step's latency is the "
        "kernel's and Open MPI's own.",
    ]
    if all(r.get("yield_when_idle") for r in model.rows):
        sentences.append(
            "The ranks yield their core while they wait (Open MPI's `mpi_yield_when_idle`): "
            "on cores every host shares, a spinning rank holds up the kernel's work that "
            "carries each message between hosts."
        )
    if crowded:
        sentences.append(
            f"Runs at {crowded[0]['per_host']} ranks per host put more ranks than cores on the "
            "machine: they are oversubscribed, and marked so in every table."
        )
    return sentences


def hosts_section(models: list[HostsModel]) -> dict | None:
    """The appendix section and the main report's pointer; None without a model."""
    if not models:
        return None
    checks = rate_checks(models)
    levels = Table(
        "The model's two levels, fitted per link rate",
        [
            "rate, each way",
            "link α",
            "link β",
            "shared memory α, β",
            "rows fitted (link + shared memory)",
            "pred / meas, fitted rows",
            "pred / meas, the other rows",
        ],
        [_level_row(check) for check in checks],
        note="The link is fitted to the rows at one rank per host, shared memory to "
        "hierarchical's rows at several (given the link); the other rows are predictions the "
        "fit did not see. γ is each run's own add ceiling.",
    )
    tables = [_rate_table(m, c) for m in models for c in checks if c.level in m.levels]
    sources = ", ".join(f"`{m.path}`" for m in models)
    return {
        "what": [s for m in models for s in _what(m)],
        "levels": levels,
        "tables": tables,
        "sources": sources,
    }
