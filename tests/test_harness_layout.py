"""The harness's layout: one module per backend, each helper written once."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np

from ring.bench import kernel_bw, nccl_compat, results
from ring.report.derive import original

BACKENDS = Path(__file__).resolve().parents[1] / "ring" / "bench" / "backends"
# Modules of the package that are not backends: what every backend may import.
SHARED = {"__init__", "base", "mpi_device"}


def _imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            prefix = "ring.bench.backends."
            if node.module.startswith(prefix):
                names.add(node.module[len(prefix) :].split(".")[0])
    return names


def test_one_module_per_backend_and_none_imports_another():
    modules = {p.stem for p in BACKENDS.glob("*.py")}
    backends = modules - SHARED
    assert {"cpu", "numpy_direct", "mpi_allreduce", "mpi_ring", "gpu", "nccl"} <= backends
    for name in sorted(backends | {"base", "mpi_device"}):
        imported = _imported_modules(BACKENDS / f"{name}.py")
        assert not imported & backends, f"{name}.py imports backend modules {imported & backends}"


def test_every_backend_registers_from_its_own_module():
    from ring.bench.backends import available_backends

    found = available_backends()
    for name, module in {
        "cpu": "cpu",
        "numpy-direct": "numpy_direct",
        "mpi-allreduce": "mpi_allreduce",
        "mpi": "mpi_ring",
        "gpu": "gpu",
        "nccl": "nccl",
    }.items():
        assert found[name].__module__ == f"ring.bench.backends.{module}"


def test_the_nsys_summary_imports_without_pandas():
    # The profiling rules run ring.nsys in environments without pandas; the summary's
    # Markdown tables come from ring.nsys.markdown, which must not pull the report in.
    code = "import sys, ring.nsys.summary; print('pandas' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "False"


def test_one_busbw_factor():
    assert original.busbw_factor is results.busbw_factor
    rng = np.random.default_rng(5)
    for nodes in rng.integers(2, 64, 10):
        assert results.busbw_factor(int(nodes)) == 2 * (int(nodes) - 1) / int(nodes)
    assert results.busbw_factor(1) == 0.0


def test_kernel_bw_table_uses_the_nccl_number_format():
    row = {
        "bytes": 1 << 20,
        "count": 1 << 18,
        "dtype": "float32",
        "op": "sum",
        "kernel": "ring",
        "time_us": 12.3456,
        "kernel_GBps": 1234567.891,  # wider than its 9 columns at 2 decimals
        "copy_time_us": None,
        "copy_GBps": 1.5,
        "kernel_vs_copy": 0.87654,
        "wrong": 0,
    }
    fields = kernel_bw.table_line(row).split()
    assert fields[5:10] == ["12.35", "1234567.9", "N/A", "1.50", "0.877"]
    assert nccl_compat.format_float(98765432.1, 9) == " 98765432"
    assert nccl_compat.format_float(0.87654, 8, 3) == "   0.877"


def test_cpu_perf_is_a_harness_subcommand(monkeypatch, capsys):
    import ring.bench.ceilings
    from ring.bench.__main__ import main
    from ring.cpu import SYNC_MODES

    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: 1 << 20)
    argv = ["--nodes", "2,3", "--large-mib", "1", "--large-repeats", "2", "--small-calls", "5"]
    assert main(["cpu-perf", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ceilings (")
    rows = [line.split() for line in lines if line[:3].strip() in ("2", "3")]
    large = [r for r in rows if len(r) == 6]
    small = [r for r in rows if len(r) == 4]
    expected = [[str(n), s] for n in (2, 3) for s in SYNC_MODES]
    assert [r[:2] for r in large] == expected and [r[:2] for r in small] == expected
    # time, model, measured/model, traffic: measured and positive
    assert all(float(value) > 0 for r in large for value in (r[2], r[4], r[5]))


def test_cpu_perf_bad_input_is_one_line(capsys):
    from ring.bench.__main__ import main

    assert main(["cpu-perf", "--nodes", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "ring.bench: error: --nodes must be >= 2, got 1"
