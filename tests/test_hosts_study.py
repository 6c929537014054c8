"""The study across emulated hosts without making any (no root needed): the config switch
and the files it plans, the conditions a run records, the two-level model's fit (on runs
made up from known costs, which it must give back) and the report's section (present with
the model, absent without, escaped, every number read from the model's file)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hosts_helpers import GAMMA, LEVEL, SIZES, level_at, write_run, write_runs

from ring.model.costs import ModelInputError
from ring.model.hosts import fit_hosts, load_hosts_runs, terms, write_hosts
from ring.report.load.files import ReportInputError
from ring.report.load.hosts import load_hosts_model
from ring.study import Machine, Probe, Study
from ring.study.config import ConfigError, check_config
from ring.study.hosts import conditions, rate_Gbps

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
OK = Probe(True, "here")
MACHINE = Machine(0, "none", OK, Probe(False, "no nsys"), OK)


def _config(**hosts) -> dict:
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["hosts"].update(hosts)
    check_config(config, SCHEMA)
    return config


# -- the config switch ------------------------------------------------------------------------


def test_all_is_unchanged_while_the_switch_is_off():
    config = _config()
    assert config["hosts"]["in_all"] is False
    without = copy.deepcopy(config)
    del without["hosts"]
    check_config(without, SCHEMA)
    study = Study(config, MACHINE)
    assert study.all_files() == Study(without, MACHINE).all_files()
    assert not any("/hosts/" in path for path in study.all_files())
    # The target's own files: a run per rate and ranks per host, and the model.
    assert study.hosts_files() == [
        "results/hosts/1gbit_r1_float32.csv",
        "results/hosts/1gbit_r2_float32.csv",
        "results/hosts/10gbit_r1_float32.csv",
        "results/hosts/10gbit_r2_float32.csv",
        "results/hosts/model_hosts.json",
    ]


def test_the_switch_on_adds_the_runs_and_the_model_to_all():
    study = Study(_config(in_all=True), MACHINE)
    files = study.all_files()
    assert set(study.hosts_files()) <= set(files)
    assert study.hosts_here() == ["results/hosts/model_hosts.json"]


def test_the_runs_take_the_mpi_backends_every_algorithm_and_the_sections_sizes():
    args = Study(_config(), MACHINE).hosts_args()
    assert args.startswith("--backend mpi,mpi-allreduce ")
    assert "--algorithm ring,hierarchical,auto" in args
    assert "-b 4K -e 16M -f 4" in args and "--out-of-place 0" in args


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("rates", ["fast"], "hosts.rates.0"),
        ("count", 1, "hosts.count"),
        ("set", "Bad_Name", "hosts.set"),
        ("algorithms", ["ring", "nope"], "hosts.algorithms.1"),
        ("max_bytes", "100G", "hosts.max_bytes"),
    ],
)
def test_a_bad_hosts_key_is_refused_in_one_line(key, value, said):
    with pytest.raises(ConfigError) as error:
        _config(**{key: value})
    assert said in str(error.value) and "\n" not in str(error.value)


def test_the_target_says_in_one_phrase_why_it_cannot_run(monkeypatch):
    from ring.study.hosts import hosts_shortfall

    config = _config()
    no_mpi = Probe(False, "MPI launcher 'mpirun' not found on PATH")
    assert hosts_shortfall(config, no_mpi).startswith("MPI launcher 'mpirun' not found")
    assert "no `hosts` section" in hosts_shortfall({}, OK)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert hosts_shortfall(config, OK).startswith("emulated hosts need root")


def test_a_run_records_its_conditions():
    meta = {"environment": {"cores": 2}, "launch_command": ["mpirun", "-n", "4"]}
    recorded = conditions(meta, "ringx", "10gbit", 2, 2)
    assert recorded["link_rate"] == "10gbit" and recorded["link_rate_Gbps"] == 10.0
    assert recorded["ranks"] == 4 and recorded["oversubscribed"] is True
    assert recorded["ranks_yield_when_idle"] is False
    assert "no latency" in recorded["added_latency"]
    assert conditions(meta, "ringx", "1gbit", 2, 1)["oversubscribed"] is False
    assert rate_Gbps("100mbit") == pytest.approx(0.1)


# -- the model --------------------------------------------------------------------------------


def test_hierarchical_sends_fewer_bytes_between_hosts_than_the_flat_ring():
    n = 1 << 20
    flat, grouped = terms("ring", 2, 2, n), terms("hierarchical", 2, 2, n)
    assert flat.net_bytes == pytest.approx(1.5 * n) and flat.net_steps == 6
    assert grouped.net_bytes == pytest.approx(n) and grouped.net_steps == 2
    assert grouped.shm_bytes == pytest.approx(n) and grouped.shm_steps == 2
    assert flat.reduced == grouped.reduced == pytest.approx(0.75 * n)
    # One rank per host: no shared-memory level, the two alike.
    assert terms("hierarchical", 2, 1, n) == terms("ring", 2, 1, n)


def test_the_fit_gives_back_the_costs_the_runs_were_made_from(tmp_path):
    levels, rows = fit_hosts(load_hosts_runs(write_runs(tmp_path)))
    assert [level["rate"] for level in levels] == ["1gbit", "10gbit"]
    for level in levels:
        truth = level_at(level["rate"])
        for key, value in truth.items():
            assert level[key] == pytest.approx(value, rel=1e-3), (level["rate"], key)
        assert level["gamma_s_per_B"] == pytest.approx(GAMMA)
        assert level["link_GBps"] == pytest.approx(rate_Gbps(level["rate"]) / 8, rel=1e-3)
        assert level["net_rows"] == 3 * len(SIZES) and level["shm_rows"] == len(SIZES)
        assert level["shm_oversubscribed"] is True
    priced = [r for r in rows if r["predicted_us"] is not None]
    assert all(r["ratio"] == pytest.approx(1, rel=1e-3) for r in priced)
    # The flat ring at 2 ranks per host: a prediction the fit never saw.
    unseen = [r for r in priced if r["per_host"] == 2 and r["algorithm"] == "ring"]
    assert unseen and all(r["fitted"] == "" for r in unseen)


def test_mpi_allreduce_rows_have_no_prediction_and_say_why(tmp_path):
    _, rows = fit_hosts(load_hosts_runs(write_runs(tmp_path, rates=("1gbit",))))
    peers = [r for r in rows if r["backend"] == "mpi-allreduce"]
    assert peers and all(r["predicted_us"] is None and r["ratio"] is None for r in peers)
    assert all("Open MPI picks its own algorithm" in r["why_none"] for r in peers)


def test_a_run_without_conditions_is_refused_in_one_line(tmp_path):
    path = write_run(tmp_path, "1gbit", 1)
    path.with_suffix(".json").write_text(json.dumps({"environment": {}}))
    with pytest.raises(ModelInputError, match="no conditions of a run across hosts"):
        load_hosts_runs([path])
    done = subprocess.run(
        [sys.executable, "-m", "ring.model", "hosts", str(path), "--out", str(tmp_path / "m.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr


def test_a_link_only_run_leaves_the_shared_memory_level_unfitted(tmp_path):
    levels, _ = fit_hosts(load_hosts_runs([write_run(tmp_path, "1gbit", 1)]))
    assert levels[0]["shm_fitted"] is False and levels[0]["alpha_shm_s"] == 0
    assert levels[0]["alpha_net_s"] == pytest.approx(LEVEL["alpha_net_s"], rel=1e-3)


# -- the report's section ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def a_run(tmp_path_factory) -> Path:
    """A tiny run of this build (the report needs one besides the model across hosts)."""
    from report_helpers import run_bench

    folder = tmp_path_factory.mktemp("run")
    return run_bench(folder / "cpu" / "sweep_n2_float32.csv", "--backend", "cpu", "--nodes", "2")


def _model(tmp_path: Path, edit=None) -> Path:
    out = tmp_path / "hosts" / "model_hosts.json"
    write_hosts(out, write_runs(tmp_path / "runs"))
    if edit:
        document = json.loads(out.read_text())
        edit(document)
        out.write_text(json.dumps(document))
    return out


def _build(tmp_path: Path, run: Path, hosts=()) -> tuple[str, str, str, str]:
    from ring.report import build_report

    out = tmp_path / "report"
    build_report([run], hosts=list(hosts), figures_dir=tmp_path / "figures", out_dir=out)
    names = ("report.md", "appendix.md", "index.html", "appendix.html")
    return tuple((out / name).read_text() for name in names)  # type: ignore[return-value]


def _section(appendix: str) -> str:
    return appendix.split("## Across emulated hosts", 1)[1].split("\n## ", 1)[0]


def test_the_section_is_there_with_the_model_and_absent_without(tmp_path, a_run):
    report, appendix, index, appendix_html = _build(tmp_path, a_run, [_model(tmp_path)])
    assert "## Across emulated hosts" in appendix
    assert "[appendix](appendix.md#across-emulated-hosts)" in report
    assert 'id="across-emulated-hosts"' in appendix_html
    assert 'href="appendix.html#across-emulated-hosts"' in index
    section = _section(appendix)
    for words in ("real TCP", "tbf", "No latency is added", "shares this machine's 2 cores"):
        assert words in section, words
    assert "2, oversubscribed (4 ranks on 2 cores)" in section
    assert "MPI_Allreduce has no prediction" in section
    bare = _build(tmp_path / "bare", a_run)
    assert not any("emulated hosts" in text.lower() for text in bare)


def _cells(section: str, title: str) -> list[list[str]]:
    table = section.split(f"### {title}", 1)[1].split("\n### ", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")][2:]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


PER_SIZE = "measured and predicted, per size"


def test_every_number_of_the_section_is_read_from_the_model(tmp_path, a_run):
    from ring.report.words.fmt import format_bytes, format_number, format_ratio

    def odd(document):  # values no formula of the report could have typed
        document["rows"][0]["measured_us"] = 12345.678
        for row in document["rows"]:
            row["cores"] = 7
        document["levels"][0]["alpha_net_s"] = 0.000987654

    path = _model(tmp_path, odd)
    document = json.loads(path.read_text())
    section = _section(_build(tmp_path, a_run, [path])[1])
    assert "this machine's 7 cores" in section and "(4 ranks on 7 cores)" in section
    levels = _cells(section, "The model's two levels, fitted per link rate")
    assert [cells[1] for cells in levels] == [
        f"{format_number(level['alpha_net_s'] * 1e6)} µs" for level in document["levels"]
    ]
    assert levels[0][1] == "988 µs"
    shown = {
        (cells[0], cells[3], cells[4], cells[5])
        for level in document["levels"]
        for cells in _cells(
            section, f"At {level['rate']} each way: measured and predicted, per size"
        )
    }
    expected = {
        (
            format_bytes(row["nbytes"]),
            format_number(row["measured_us"]),
            "none" if row["predicted_us"] is None else format_number(row["predicted_us"]),
            "" if row["ratio"] is None else format_ratio(row["ratio"]),
        )
        for row in document["rows"]
    }
    assert shown == expected
    assert any(cells[1] == "12,346" for cells in shown)


def test_the_section_escapes_what_it_reads(tmp_path, a_run):
    def hostile(document):
        document["rows"][0]["algorithm"] = "<script>alert(1)</script>|x"
        document["rows"][0]["resolved"] = "ring"

    _, appendix, _, appendix_html = _build(tmp_path, a_run, [_model(tmp_path, hostile)])
    assert "<script>alert" not in appendix_html and "&lt;script&gt;" in appendix_html
    assert "alert(1)</script>\\|x" in _section(appendix)  # the Markdown cell stays one cell


def test_a_malformed_model_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "model_hosts.json"
    path.write_text(json.dumps({"kind": "hosts-model", "levels": [], "rows": []}))
    with pytest.raises(ReportInputError, match=r"model_hosts\.json: no level"):
        load_hosts_model(path)
    path.write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(ReportInputError, match="not a model across hosts"):
        load_hosts_model(path)
