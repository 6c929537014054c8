"""The study across emulated hosts (scripts/hosts.sh): its files, its harness flags, and
the conditions each run is recorded under.

Two or more "hosts" on this machine, each its own network, UTS, IPC and mount namespace,
joined by tbf rate-limited links: Open MPI sees separate nodes, so the hierarchical ring's
inter-host phase crosses real TCP. One run per link rate and ranks per host; each run is
the MPI backends at those ranks, every configured algorithm. Making hosts needs root, so
`all` asks for none of this unless the config's ``hosts.in_all`` does.

``python -m ring.study.conditions FILE.json ...`` adds the run's conditions (link rate, hosts,
ranks per host, whether it was oversubscribed) to the harness's result document.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from .config import sweep_settings

__all__ = [
    "HOSTS_SCRIPT",
    "conditions",
    "hosts_files",
    "hosts_fit_file",
    "hosts_in_all",
    "hosts_model_stem",
    "hosts_shortfall",
    "hosts_stem",
    "rate_Gbps",
    "why_no_hosts",
]

HOSTS_SCRIPT = "scripts/hosts.sh"
# What the emulated links do not do, recorded with every run (netem's delay does not work on
# the machines this was built on, so none is added: a link's latency is the kernel's own).
ADDED_LATENCY = "none: netem delay is unavailable, the links add no latency"
STATE_ROOT = Path(os.environ.get("RING_HOSTS_STATE", "/run/ring-hosts"))


def hosts_stem(rate: object = "{rate}", per_host: object = "{per_host}", dtype="{dtype}") -> str:
    """One run across the hosts: a link rate, ranks per host, a dtype."""
    return f"hosts/{rate}_r{per_host}_{dtype}"


def hosts_model_stem() -> str:
    """The two-level model fitted to every run across hosts, beside the measurements."""
    return "hosts/model_hosts"


def hosts_in_all(config: Mapping) -> bool:
    section = config.get("hosts") or {}
    return section.get("in_all", False) in (True, "true")


def hosts_files(config: Mapping, results: str) -> list[str]:
    """The runs across hosts the configuration asks for (none without the section)."""
    section = config.get("hosts")
    if not section:
        return []
    dtypes = sweep_settings(config, "hosts")["dtypes"]
    return [
        f"{results}/{hosts_stem(rate, per_host, dtype)}.csv"
        for rate in section["rates"]
        for per_host in section["ranks_per_host"]
        for dtype in dtypes
    ]


def hosts_fit_file(results: str) -> str:
    return f"{results}/{hosts_model_stem()}.json"


def why_no_hosts() -> str | None:
    """Why emulated hosts cannot be made here (hosts.sh refuses the same), or None."""
    if os.geteuid() != 0:
        return "emulated hosts need root (network namespaces, veth links, tc)"
    for tool in ("ip", "tc", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install iproute2 util-linux)"
    return None


def hosts_shortfall(config: Mapping, mpi) -> str | None:
    """Why the `hosts` target cannot run here (``mpi``: the machine's MPI probe), or None."""
    if "hosts" not in config:
        return "the config has no `hosts` section (config/config.yaml has one)"
    if not mpi.ok:
        from .targets import MPI_HINT

        return f"{mpi.why}; {MPI_HINT}"
    return why_no_hosts()


def rate_Gbps(rate: str) -> float:
    """Gbit/s of a tc rate as the config writes it (100mbit, 1gbit, 10gbit)."""
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmg])bit", rate)
    if not found:
        raise ValueError(f"{rate!r} is not a tc rate such as 1gbit")
    return float(found.group(1)) * {"k": 1e-6, "m": 1e-3, "g": 1.0}[found.group(2)]


def _hostnames(set_name: str) -> list[str]:
    """The hosts of a set as hosts.sh recorded them (empty if it is not up)."""
    try:
        lines = (STATE_ROOT / set_name / "hosts").read_text().splitlines()
    except OSError:
        return []
    return [line.split()[1] for line in lines if len(line.split()) == 3]


def conditions(meta: Mapping, set_name: str, rate: str, hosts: int, per_host: int) -> dict:
    """The conditions of one run across hosts: what the result alone does not say."""
    cores = int(meta.get("environment", {}).get("cores") or 1)
    ranks = hosts * per_host
    launch = " ".join(str(word) for word in meta.get("launch_command") or [])
    return {
        "emulated_hosts": hosts,
        "hostnames": _hostnames(set_name),
        "hosts_set": set_name,
        "ranks_per_host": per_host,
        "ranks": ranks,
        "link_rate": rate,
        "link_rate_Gbps": rate_Gbps(rate),
        "link_shaping": "tc tbf on both ends of each host's veth, each direction",
        "added_latency": ADDED_LATENCY,
        "cores_shared_by_all_hosts": cores,
        "oversubscribed": ranks > cores,
        # Whether the ranks gave up their core while waiting (workflow/rules/hosts.smk).
        "ranks_yield_when_idle": "mpi_yield_when_idle 1" in launch,
    }
