"""The workflow's `hosts` target and `hosts.in_all` switch: dry runs (`all` plans nothing of
it while the switch is off; the target, or `all` with the switch on, plans a run per link
rate and ranks per host and the model), and, as root where namespaces are allowed, the
target end to end on tiny sizes with the report's section built from what it wrote.
Every namespace and link the run made is gone afterwards, after a failure too (checked in
the fixture's finalizer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cluster_helpers import hosts, hosts_leftovers, unique, why_no_hosts, why_no_mpi
from workflow_helpers import ROOT, copy_workflow, counts, dry_run, pinned_config, snakemake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HOSTS_RULES = {"hosts_run", "hosts_model"}
not_root = pytest.mark.skipif(os.geteuid() != 0, reason="the target stops without root")


def test_all_plans_nothing_across_hosts_while_the_switch_is_off(workdir, stubs, tmp_path):
    jobs = dry_run(workdir, ["all"], pinned_config(tmp_path, stubs), config_args=["gpus=0"])
    assert HOSTS_RULES.isdisjoint(counts(jobs))
    report = next(job for job in jobs if job.rule == "build_report")
    assert "--hosts" not in report.shell


@not_root
def test_the_target_plans_a_run_per_rate_and_ranks_per_host_and_the_model(workdir, stubs, tmp_path):
    jobs = dry_run(workdir, ["hosts"], pinned_config(tmp_path, stubs))
    assert counts(jobs) == {"hosts_run": 4, "hosts_model": 1, "hosts": 1}
    runs = {
        (j.wildcards["rate"], j.wildcards["per_host"]): j for j in jobs if j.rule == "hosts_run"
    }
    assert set(runs) == {("1gbit", "1"), ("1gbit", "2"), ("10gbit", "1"), ("10gbit", "2")}
    crowded = runs[("10gbit", "2")].shell
    assert "hosts.sh --name ringw --rate 10gbit --slots 2 up 2" in crowded
    assert "mpirun --mca mpi_yield_when_idle 1 --map-by ppr:2:node -n 4" in crowded
    assert "--algorithm ring,hierarchical,auto" in crowded and "--nodes 4" in crowded
    assert "ring.study.conditions" in crowded and crowded.endswith("exit $status")
    assert runs[("1gbit", "2")].resources.get("bench") == "1"


@not_root
def test_the_switch_on_puts_the_runs_and_the_section_in_all(workdir, stubs, tmp_path):
    switch = tmp_path / "in_all.yaml"
    switch.write_text("hosts:\n  in_all: true\n")
    configs = [pinned_config(tmp_path, stubs), str(switch)]
    jobs = dry_run(workdir, ["all"], *configs, config_args=["gpus=0"])
    assert counts(jobs)["hosts_run"] == 4 and counts(jobs)["hosts_model"] == 1
    report = next(job for job in jobs if job.rule == "build_report")
    assert "--hosts results/hosts/model_hosts.json" in report.shell


@pytest.mark.skipif(os.geteuid() == 0, reason="as root the target can run")
def test_the_target_without_root_stops_in_one_line(workdir, stubs, tmp_path):
    done = snakemake(workdir, "-n", "hosts", "--configfile", pinned_config(tmp_path, stubs))
    assert done.returncode != 0
    assert "error: target hosts: emulated hosts need root" in done.stderr


# -- end to end, as root ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def across_hosts(tmp_path_factory):
    """A copy of the workflow after `snakemake hosts` on tiny sizes, one rate."""
    why = why_no_hosts() or why_no_mpi()
    if why:
        pytest.skip(why)
    name = unique("wh")
    workdir = copy_workflow(tmp_path_factory.mktemp("hosts"), ("ring", "scripts"))
    tiny = workdir / "tiny.yaml"
    tiny.write_text(
        f"hosts:\n  set: {name}\n  rates: [1gbit]\n  ranks_per_host: [1, 2]\n"
        "  min_bytes: 4K\n  max_bytes: 256K\n  step_factor: 8\n  iters: 3\n  warmup: 1\n"
    )
    try:
        done = snakemake(workdir, "--cores", "2", "hosts", "--configfile", str(tiny), timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        yield workdir, name
    finally:
        hosts(name, "down")
        assert hosts_leftovers(name) == []


def test_the_target_writes_runs_with_their_conditions_and_the_model(across_hosts):
    workdir, name = across_hosts
    results = workdir / "results" / "hosts"
    for per_host in (1, 2):
        meta = json.loads((results / f"1gbit_r{per_host}_float32.json").read_text())
        conditions = meta["conditions"]
        assert conditions["link_rate"] == "1gbit" and conditions["ranks_per_host"] == per_host
        assert conditions["hostnames"] == [f"{name}-h0", f"{name}-h1"]
        assert conditions["oversubscribed"] == (2 * per_host > meta["environment"]["cores"])
        assert conditions["ranks_yield_when_idle"] is True
        assert meta["environment"]["mpi_hosts"] == 2 and meta["wrong_total"] == 0
    model = json.loads((results / "model_hosts.json").read_text())
    assert [level["rate"] for level in model["levels"]] == ["1gbit"]
    assert model["levels"][0]["net_rows"] > 0 and model["levels"][0]["shm_fitted"]
    assert (results / "model_hosts.csv").is_file()
    assert hosts_leftovers(name) == []  # every job took its hosts down


def test_the_report_sets_the_prediction_beside_what_the_target_measured(across_hosts, tmp_path):
    workdir, _ = across_hosts
    results = workdir / "results" / "hosts"
    command = [
        sys.executable,
        "-m",
        "ring.report",
        "--sweep",
        str(results / "1gbit_r1_float32.csv"),
    ]
    command += ["--hosts", str(results / "model_hosts.json")]
    command += ["--figures", str(tmp_path / "figures"), "--out", str(tmp_path / "report")]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    appendix = (tmp_path / "report" / "appendix.md").read_text()
    section = appendix.split("## Across emulated hosts", 1)[1].split("\n## ", 1)[0]
    assert "### At 1gbit each way: measured and predicted, per size" in section
    assert "oversubscribed" in section and "No latency is added" in section
    assert "appendix.md#across-emulated-hosts" in (tmp_path / "report" / "report.md").read_text()
