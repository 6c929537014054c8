"""``python -m ring.bench``'s bad input (one line on stderr, exit 2, no file; a backend's
launch refused where it cannot run) and ``ring.bench merge``."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
from test_bench import (  # noqa: F401 - outside_mpirun and small_ceilings: autouse fixtures
    CONTRACT_COLUMNS,
    ENVIRONMENT_KEYS,
    TINY,
    bench,
    outside_mpirun,
    read_rows,
    small_ceilings,
)

from ring import _scripts
from ring.bench.__main__ import main

# -- bad input: one line, exit 2, no file ----------------------------------------------------

BAD_INPUT = {
    "unparsable size": (["-b", "12Q"], "cannot parse size"),
    "unparsable max": (["-e", "lots"], "cannot parse size"),
    "min above max": (["-b", "1M", "-e", "1K"], "larger than"),
    "below one element": (["-b", "2", "-d", "float32"], "at least one float32"),
    "step factor 1": (["-f", "1"], "must be > 1"),
    "step factor < 1": (["-f", "0.5"], "must be > 1"),
    "step factor nan": (["-f", "nan"], "must be > 1"),
    "step factor text": (["-f", "x"], "not a number"),
    "too many sizes": (["-b", "1", "-e", "1M", "-f", "1.0001", "-d", "int8"], "more than"),
    "nodes 0": (["--nodes", "0"], "--nodes"),
    "nodes negative": (["--nodes", "2,-1"], "--nodes"),
    "nodes empty item": (["--nodes", "2,,4"], "empty item"),
    "nodes text": (["--nodes", "two"], "not a whole number"),
    "unknown backend": (["--backend", "cpu,nccl-magic"], "unknown backend 'nccl-magic'"),
    "unknown dtype": (["-d", "float8"], "unknown dtype"),
    "bool dtype": (["-d", "bool"], "unknown dtype"),
    "unknown op": (["-o", "mean"], "unknown op"),
    "op undefined for dtype": (["-o", "max", "-d", "complex64"], "not defined for complex"),
    "iters 0": (["-n", "0"], "-n/--iters"),
    "warmup negative": (["-w", "-1"], "-w/--warmup"),
    "check -1": (["-c", "-1"], "-c/--check must be >= 0"),
    "unknown sync": (["--sync", "spin"], "unknown sync"),
    "negative seed": (["--seed", "-3"], "--seed"),
    "unknown flag": (["--frobnicate"], "unrecognized arguments"),
    "out not csv": (["--out", "results.txt"], "must name a .csv"),
    "mixed launch": (["--backend", "cpu,mpi-allreduce"], None),
    "too large": (["-e", "1T"], "memory"),
    "timeout 0": (["--timeout", "0"], "--timeout must be a positive"),
    "timeout text": (["--timeout", "soon"], "not a number"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input(tmp_path, capsys, case, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args, message = BAD_INPUT[case]
    out = [] if "--out" in args else ["--out", str(tmp_path / "new" / "r.csv")]
    assert main([*args, *out]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ring.bench: error: "), captured.err
    if message:
        assert message in lines[0]
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == []


def test_bad_input_from_the_command_line_has_no_traceback(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "ring.bench", "-f", "1", "--out", str(tmp_path / "r.csv")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_mpi_allreduce_outside_mpirun(tmp_path, capsys):
    pytest.importorskip("mpi4py")
    assert main(["--backend", "mpi-allreduce", "--out", str(tmp_path / "r.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be launched under mpirun" in err
    assert list(tmp_path.iterdir()) == []


def test_mpi_allreduce_without_mpi4py(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now raises ImportError
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert main(["--backend", "mpi-allreduce", "--out", str(tmp_path / "r.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mpi4py" in err and "pip install" in err
    assert list(tmp_path.iterdir()) == []


def test_single_process_backend_under_mpirun_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert main(["--backend", "cpu", "--out", str(tmp_path / "r.csv")]) == 2
    assert "without mpirun" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


# -- merge -----------------------------------------------------------------------------------


def test_merge_keeps_every_run(tmp_path, capsys):
    assert bench(tmp_path, "--backend", "cpu", "--nodes", "2", name="a.csv")[0] == 0
    assert bench(tmp_path, "--backend", "numpy-direct", "--nodes", "2,4", name="b.csv")[0] == 0
    merged = tmp_path / "all" / "merged.csv"
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert main(["merge", "--out", str(merged), str(a), str(b)]) == 0
    columns, rows = read_rows(merged)
    assert columns[-1] == "run" and set(columns) >= CONTRACT_COLUMNS
    assert len(rows) == len(read_rows(a)[1]) + len(read_rows(b)[1])
    assert {row["run"] for row in rows if row["backend"] == "cpu"} == {"0"}
    assert {row["run"] for row in rows if row["backend"] == "numpy-direct"} == {"1"}
    document = json.loads(merged.with_suffix(".json").read_text())
    assert [run["csv"] for run in document["runs"]] == [str(a), str(b)]
    assert document["runs"][1]["config"]["backends"] == ["numpy-direct"]
    assert document["ceilings"] == document["runs"][0]["ceilings"]
    assert set(document["environment"]) >= ENVIRONMENT_KEYS
    assert document["wrong_total"] == 0
    assert set(document["backends"]) == {"cpu", "numpy-direct"}


@pytest.mark.parametrize("problem", ["duplicate", "no json", "missing", "not csv"])
def test_merge_bad_input(tmp_path, capsys, problem):
    assert bench(tmp_path, "--backend", "cpu", name="a.csv")[0] == 0
    a = tmp_path / "a.csv"
    inputs = {
        "duplicate": [a, a],
        "no json": [a],
        "missing": [tmp_path / "nope.csv"],
        "not csv": [a.with_suffix(".json")],
    }[problem]
    if problem == "no json":
        a.with_suffix(".json").unlink()
    capsys.readouterr()
    merged = tmp_path / "m.csv"
    assert main(["merge", "--out", str(merged), *map(str, inputs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ring.bench: error: ")
    assert not merged.exists() and not merged.with_suffix(".json").exists()


@pytest.mark.parametrize("script", ["bench", "nsys", "report"])
def test_a_console_script_exits_with_its_tools_status(monkeypatch, script):
    """``ring-bench``, ``ring-nsys`` and ``ring-report`` exit as ``python -m`` does: with
    what the tool's ``main()`` returns (bad input: 2), not 0 whatever happened."""
    module = importlib.import_module(_scripts.TOOLS[f"ring-{script}"])
    monkeypatch.setattr(module, "main", lambda: 2)
    with pytest.raises(SystemExit) as exited:
        getattr(_scripts, script)()
    assert exited.value.code == 2
