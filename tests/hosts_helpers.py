"""Runs across emulated hosts made up from known costs: the files `snakemake hosts` writes
(FILE.csv with its FILE.json and the run's conditions), each time the two-level model's
own, so a fit of them must give the costs back."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ring.model.hosts import level_seconds, terms

# The costs the runs are made from: a link of 1 Gbit/s with 40 µs a step, shared memory at
# 8 GB/s with 3 µs a step, and γ from an add ceiling of 60 GB/s.
LEVEL = {
    "alpha_net_s": 40e-6,
    "beta_net_s_per_B": 1 / 0.125e9,
    "alpha_shm_s": 3e-6,
    "beta_shm_s_per_B": 1 / 8e9,
}
ADD_GBPS = 60.0
GAMMA = 3 / (ADD_GBPS * 1e9)
SIZES = [4096 * 4**k for k in range(7)]  # 4 KiB .. 16 MiB
COLUMNS = ["backend", "sync", "algorithm", "executor", "buffers", "nodes", "bytes", "time_us"]
COLUMNS += ["wrong", "resolved"]


def _row(backend, algorithm, resolved, nodes, nbytes, seconds) -> dict:
    return {
        "backend": backend,
        "sync": "none",
        "algorithm": algorithm,
        "executor": "",
        "buffers": "host",
        "nodes": nodes,
        "bytes": nbytes,
        "time_us": f"{seconds * 1e6:.6f}",
        "wrong": 0,
        "resolved": resolved if algorithm == "auto" else "",
    }


def write_run(folder: Path, rate: str, per_host: int, level=LEVEL, hosts: int = 2) -> Path:
    """One run at ``rate`` and ``per_host`` ranks per host, timed by the model at ``level``:
    ring, hierarchical and auto (picking ring) of ours, and MPI_Allreduce."""
    nodes = hosts * per_host
    rows = []
    for nbytes in SIZES:
        for algorithm, resolved in (("ring", "ring"), ("hierarchical", "hierarchical")):
            seconds = level_seconds(terms(resolved, hosts, per_host, nbytes), level, GAMMA)
            rows.append(_row("mpi", algorithm, resolved, nodes, nbytes, seconds))
        auto = level_seconds(terms("ring", hosts, per_host, nbytes), level, GAMMA)
        rows.append(_row("mpi", "auto", "ring", nodes, nbytes, auto))
        rows.append(_row("mpi-allreduce", "", "", nodes, nbytes, 1.5 * auto))
    csv_path = folder / f"{rate}_r{per_host}_float32.csv"
    folder.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    from ring.study.hosts import conditions

    meta = {"environment": {"cores": 2}, "ceilings": {"add_GBps": ADD_GBPS}}
    meta["launch_command"] = ["mpirun", "--mca", "mpi_yield_when_idle", "1"]
    meta["conditions"] = conditions(meta, "ringt", rate, hosts, per_host)
    csv_path.with_suffix(".json").write_text(json.dumps(meta))
    return csv_path


def level_at(rate: str) -> dict:
    """:data:`LEVEL` with the link's byte cost of ``rate`` (1gbit: LEVEL's own)."""
    from ring.study.hosts import rate_Gbps

    return {**LEVEL, "beta_net_s_per_B": LEVEL["beta_net_s_per_B"] / rate_Gbps(rate)}


def write_runs(folder: Path, rates=("1gbit", "10gbit")) -> list[Path]:
    return [
        write_run(folder, rate, per_host, level_at(rate)) for rate in rates for per_host in (1, 2)
    ]
