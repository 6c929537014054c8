"""The model's two levels checked across emulated hosts: the inter-host link (α, β of the
network) and the shared-memory level (α, β within a host), fitted per link rate from the
runs of ``snakemake hosts`` (ring.study.hosts), and the prediction of every row beside its
measured time.

A call on H hosts with R ranks each (N = H·R, ranks numbered host by host) costs

    net_steps·α_net + net_bytes·β_net + shm_steps·α_shm + shm_bytes·β_shm + reduced·γ

* hierarchical (groups of the R ranks of a host, as ``Split_type(SHARED)`` forms them):
  a ring reduce-scatter within each host ((R-1) steps of n/R bytes through shared memory),
  R rings across the H hosts at once, each allreducing n/R (2(H-1) steps; the R rings
  share their host's one link, so it carries 2(H-1)/H·n each way), a ring all-gather within
  each host ((R-1) steps of n/R);
* every other algorithm is flat: the one-level coefficients (ring.model.costs), every
  step and byte at the network's price, since its slowest link on each step crosses hosts
  (for the ring, 2(N-1) steps of n/N: exact; for the others an upper bound where some of
  a step's messages stay within a host);
* γ, the cost of a byte reduced, is not fitted: it is the runs' own add ceiling (3 bytes of
  memory traffic per byte reduced, ring.model.data.ADD_TRAFFIC), far below the links here.

Fitted in two stages, each for the least squared log of predicted over measured: the network
from the rows at one rank per host (no shared-memory term, not oversubscribed), then the
shared-memory level from the residual of the rows that have such a term (hierarchical at
R > 1). Every other row is a prediction the fit did not see. MPI_Allreduce's rows have no
prediction: Open MPI picks its own algorithm, which the model does not price.
"""

from __future__ import annotations

import csv
import hashlib
import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .costs import ModelInputError, coefficients
from .data import ADD_TRAFFIC

__all__ = [
    "HostsRow",
    "Terms",
    "fit_hosts",
    "level_seconds",
    "load_hosts_runs",
    "terms",
    "write_hosts",
]

SCHEMA = 1
PEER = "mpi-allreduce"
NOT_PRICED = "Open MPI picks its own algorithm for MPI_Allreduce; the model prices ours"


@dataclass(frozen=True)
class Terms:
    """The multipliers of (α_net, β_net, α_shm, β_shm, γ) in one call's time."""

    net_steps: float
    net_bytes: float
    shm_steps: float
    shm_bytes: float
    reduced: float


@dataclass(frozen=True)
class HostsRow:
    """One measured size of one series across hosts, from a run's CSV and its conditions."""

    source: str
    rate: str
    rate_Gbps: float
    hosts: int
    per_host: int
    cores: int  # the machine's, which every host shares
    oversubscribed: bool
    yield_when_idle: bool  # the ranks gave up their core while they waited
    backend: str
    algorithm: str
    resolved: str  # the algorithm that ran (auto's pick, else the algorithm itself)
    nbytes: int
    measured_s: float
    gamma: float  # seconds per byte reduced, from the run's add ceiling


def terms(algorithm: str, hosts: int, per_host: int, nbytes: int) -> Terms:
    """The two-level terms of one call (module docstring)."""
    nodes = hosts * per_host
    reduced = (nodes - 1) / nodes * nbytes
    if algorithm == "hierarchical":
        return Terms(
            2 * (hosts - 1),
            2 * (hosts - 1) / hosts * nbytes,
            2 * (per_host - 1),
            2 * (per_host - 1) / per_host * nbytes,
            reduced,
        )
    flat = coefficients(algorithm, nodes, nbytes)
    return Terms(flat.steps, flat.link * nbytes, 0.0, 0.0, flat.reduce * nbytes)


def level_seconds(t: Terms, level: dict, gamma: float) -> float:
    """Predicted seconds of a call with terms ``t`` at a rate's fitted ``level``."""
    return (
        t.net_steps * level["alpha_net_s"]
        + t.net_bytes * level["beta_net_s_per_B"]
        + t.shm_steps * level["alpha_shm_s"]
        + t.shm_bytes * level["beta_shm_s_per_B"]
        + t.reduced * gamma
    )


def _conditions(csv_path: Path) -> tuple[dict, float]:
    """A run's conditions (ring.study.hosts) and γ from its add ceiling."""
    json_path = csv_path.with_suffix(".json")
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelInputError(f"{json_path}: cannot read the run's JSON ({exc})") from None
    conditions = meta.get("conditions")
    if not isinstance(conditions, dict) or "link_rate" not in conditions:
        raise ModelInputError(
            f"{json_path}: no conditions of a run across hosts "
            "(python -m ring.study.hosts conditions adds them)"
        )
    add = (meta.get("ceilings") or {}).get("add_GBps")
    gamma = ADD_TRAFFIC / (float(add) * 1e9) if add else 0.0
    return conditions, gamma


def load_hosts_runs(paths: Sequence[str | Path]) -> list[HostsRow]:
    """Every in-place row of the runs, with its run's conditions."""
    rows = []
    for path in map(Path, paths):
        conditions, gamma = _conditions(path)
        try:
            with open(path, newline="", encoding="utf-8") as handle:
                records = list(csv.DictReader(handle))
        except OSError as exc:
            raise ModelInputError(f"{path}: cannot read ({exc})") from None
        for record in records:
            if record.get("buffers") not in ("", "host", None):
                continue  # shared buffers move no message: not a link's measurement
            algorithm = record.get("algorithm") or record["backend"]
            rows.append(
                HostsRow(
                    str(path),
                    str(conditions["link_rate"]),
                    float(conditions["link_rate_Gbps"]),
                    int(conditions["emulated_hosts"]),
                    int(conditions["ranks_per_host"]),
                    int(conditions["cores_shared_by_all_hosts"]),
                    bool(conditions["oversubscribed"]),
                    bool(conditions.get("ranks_yield_when_idle", False)),
                    record["backend"],
                    algorithm,
                    record.get("resolved") or algorithm,
                    int(record["bytes"]),
                    float(record["time_us"]) * 1e-6,
                    gamma,
                )
            )
    if not rows:
        raise ModelInputError("no rows in the runs given")
    return rows


def _fit_level(design: list[list[float]], known: list[float], measured: list[float]) -> list[float]:
    """Two non-negative costs x minimising Σ log²((known + design·x) / measured): a ratio
    off either way weighs alike, so one call that a scheduler's tick made slow (or one that
    missed the tick) cannot pull the costs of every size after it. Started from
    non-negative least squares on relative error."""
    from scipy.optimize import least_squares, nnls

    a, base, y = (np.asarray(v, dtype=float) for v in (design, known, measured))
    start, _ = nnls(a / y[:, None], (y - base) / y)
    # Each cost in units whose term is a typical call's time: the solver sees numbers near 1.
    unit = np.median(y) / np.maximum(np.median(a, axis=0), 1e-30)

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(base + a @ (x * unit), 1e-30)) - np.log(y)

    fit = least_squares(residual, np.maximum(start / unit, 1e-9), bounds=(0.0, np.inf))
    # A cost whose term is a millionth of a typical call's time is the bound, not a cost.
    return [float(v * u) if v > 1e-6 else 0.0 for v, u in zip(fit.x, unit, strict=True)]


def _fit_rate(rows: list[HostsRow]) -> dict:
    """One rate's levels: the network from one rank per host, then shared memory."""
    ours = [r for r in rows if r.backend != PEER and r.measured_s > 0]
    single = [r for r in ours if r.per_host == 1]
    if not single:
        raise ModelInputError(f"rate {rows[0].rate}: no run with one rank per host to fit the link")
    net = [terms(r.resolved, r.hosts, 1, r.nbytes) for r in single]
    alpha_net, beta_net = _fit_level(
        [[t.net_steps, t.net_bytes] for t in net],
        [t.reduced * r.gamma for r, t in zip(single, net, strict=True)],
        [r.measured_s for r in single],
    )
    level = {"alpha_net_s": alpha_net, "beta_net_s_per_B": beta_net}
    level.update({"alpha_shm_s": 0.0, "beta_shm_s_per_B": 0.0})
    grouped = [r for r in ours if terms(r.resolved, r.hosts, r.per_host, r.nbytes).shm_steps]
    if grouped:
        both = [terms(r.resolved, r.hosts, r.per_host, r.nbytes) for r in grouped]
        alpha_shm, beta_shm = _fit_level(
            [[t.shm_steps, t.shm_bytes] for t in both],
            [level_seconds(t, level, r.gamma) for r, t in zip(grouped, both, strict=True)],
            [r.measured_s for r in grouped],
        )
        level.update({"alpha_shm_s": alpha_shm, "beta_shm_s_per_B": beta_shm})
    return {
        "rate": rows[0].rate,
        "rate_GBps": rows[0].rate_Gbps / 8,
        **level,
        "link_GBps": 1e-9 / beta_net if beta_net > 0 else None,
        "gamma_s_per_B": statistics.median(r.gamma for r in rows),
        "net_rows": len(single),
        "shm_rows": len(grouped),
        "shm_oversubscribed": any(r.oversubscribed for r in grouped),
        "shm_fitted": bool(grouped),
    }


def _prediction(row: HostsRow, level: dict) -> dict:
    """A row with its prediction (or why it has none) and what the fit took it for."""
    out = {k: v for k, v in asdict(row).items() if k not in ("measured_s", "gamma")}
    out["measured_us"] = row.measured_s * 1e6
    if row.backend == PEER:
        return {**out, "predicted_us": None, "ratio": None, "fitted": "", "why_none": NOT_PRICED}
    t = terms(row.resolved, row.hosts, row.per_host, row.nbytes)
    fitted = "net" if row.per_host == 1 else ("shm" if t.shm_steps else "")
    predicted = level_seconds(t, level, row.gamma) * 1e6
    ratio = predicted / out["measured_us"] if out["measured_us"] > 0 else None
    return {**out, "predicted_us": predicted, "ratio": ratio, "fitted": fitted, "why_none": ""}


def _gbps(rows: list[HostsRow], rate: str) -> float:
    return next(r.rate_Gbps for r in rows if r.rate == rate)


def fit_hosts(rows: list[HostsRow]) -> tuple[list[dict], list[dict]]:
    """Per rate, the fitted levels; and every row with its prediction."""
    levels, predictions = [], []
    for rate in sorted({r.rate for r in rows}, key=lambda rate: _gbps(rows, rate)):
        at_rate = [r for r in rows if r.rate == rate]
        level = _fit_rate(at_rate)
        levels.append(level)
        predictions += [_prediction(r, level) for r in at_rate]
    return levels, predictions


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_hosts(out: str | Path, paths: Sequence[str | Path]) -> tuple[list[dict], list[dict]]:
    """Fit the runs and write ``out`` (JSON) and the rows beside it (``.csv``)."""
    rows = load_hosts_runs(paths)
    levels, predictions = fit_hosts(rows)
    out = Path(out)
    document = {
        "schema": SCHEMA,
        "kind": "hosts-model",
        "inputs": [{"path": str(p), "csv_sha256": _digest(str(p))} for p in paths],
        "levels": levels,
        "rows": predictions,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    with open(out.with_suffix(".csv"), "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(predictions[0]))
        writer.writeheader()
        writer.writerows(predictions)
    return levels, predictions
