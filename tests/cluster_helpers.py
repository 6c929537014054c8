"""What the tests of scripts/hosts.sh and scripts/slurm.sh share: running the scripts, why
they cannot run here (a reason to skip with), names no other run uses, and what a set of
hosts or a cluster left behind (which must be nothing once it is down)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from test_bench import SMALL_CEILINGS_ENV

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ROOT / "scripts" / "hosts.sh"
SLURM = ROOT / "scripts" / "slurm.sh"
HOSTS_STATE = Path("/run/ring-hosts")
SLURM_STATE = Path("/run/ring-slurm")
SLURM_PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")


def unique(prefix: str) -> str:
    """A set or cluster name of this test run's own (another run may be up beside it)."""
    return f"{prefix}{os.getpid() % 100000}"


def run_script(script: Path, *args: str, timeout: float = 120, env=None, cwd=ROOT):
    return subprocess.run(
        ["bash", str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        check=False,
    )


def hosts(name: str, *args: str, timeout: float = 120, env=None):
    return run_script(HOSTS, "--name", name, *args, timeout=timeout, env=env)


def slurm(name: str, *args: str, timeout: float = 120):
    return run_script(SLURM, "--name", name, *args, timeout=timeout)


def why_no_hosts() -> str | None:
    """Why emulated hosts cannot be brought up here, or None."""
    if os.geteuid() != 0:
        return "emulated hosts need root (namespaces, veth, tc)"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nsenter", "util-linux")):
        if shutil.which(tool) is None:
            return f"{tool} not found (apt-get install {package})"
    probe = subprocess.run(
        ["unshare", "--net", "--uts", "--ipc", "--mount", "true"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"cannot create namespaces here: {probe.stderr.strip()}"
    return None


def why_no_mpi() -> str | None:
    if shutil.which("mpirun") is None:
        return "mpirun not found (apt-get install openmpi-bin)"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py not installed (pip install '.[mpi]')"
    return None


def why_no_slurm() -> str | None:
    if os.geteuid() != 0:
        return "a SLURM cluster here needs root (munged, slurmctld, slurmd)"
    missing = [p for p in SLURM_PROGRAMS if shutil.which(p, path=_sbin_path()) is None]
    if missing:
        return (
            f"{', '.join(missing)} not found "
            "(apt-get install munge slurmctld slurmd slurm-client, or bash scripts/setup.sh test)"
        )
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def run_env() -> dict[str, str]:
    """This interpreter's bin first on PATH (the ranks run `python -m ...`), small ceilings."""
    env = {**os.environ, **SMALL_CEILINGS_ENV}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), _sbin_path()])
    return env


def hosts_leftovers(name: str) -> list[str]:
    """Every namespace, link, process and state file of the set ``name`` that still exists."""
    left = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"netns {line.split()[0]}" for line in netns.splitlines() if line.startswith(name)]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    pattern = re.compile(rf"^\d+: ({re.escape(name)}-(?:h\d+|br))[@:]")
    left += [f"link {m.group(1)}" for line in links.splitlines() if (m := pattern.match(line))]
    if (HOSTS_STATE / name).exists():
        left.append(f"state {HOSTS_STATE / name}")
    return left


def slurm_leftovers(name: str, holders: list[int]) -> list[str]:
    """The cluster's processes that still exist, and its state: the PIDs that held its
    daemons, any process whose command line names its state folder (munged, slurmctld) or
    whose mounts do (slurmd, whose /etc/slurm is bound from there, and every job step)."""
    state = str(SLURM_STATE / name)
    left = [f"process {pid}" for pid in holders if Path(f"/proc/{pid}").exists()]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == str(os.getpid()):
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            mounts = (proc / "mountinfo").read_text()
        except OSError:
            continue
        # A bind mount's source is written relative to its file system (/run may be one).
        if state in cmdline or f"{SLURM_STATE.name}/{name}/etc-" in mounts:
            left.append(f"process {proc.name}: {cmdline.strip()}")
    if Path(state).exists():
        left.append(f"state {state}")
    return left


def slurm_holders(name: str) -> list[int]:
    return [int(p.read_text()) for p in (SLURM_STATE / name).glob("*.holder")]


def scontrol_jobs(name: str) -> list[dict[str, str]]:
    """`scontrol show job -o` of the cluster: one dict per job (finished ones included while
    MinJobAge keeps them)."""
    env = {**os.environ, "SLURM_CONF": str(SLURM_STATE / name / "etc" / "slurm.conf")}
    done = subprocess.run(
        ["scontrol", "show", "job", "-o"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    jobs = []
    for line in done.stdout.splitlines():
        fields = dict(re.findall(r"(\S+?)=(\S*)", line))
        if fields:
            jobs.append(fields)
    return jobs
