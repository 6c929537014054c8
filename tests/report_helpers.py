"""What the report tests share: the harness run on tiny sizes in the workflow's layout,
the profile tables from the kept Nsight Systems output, and readers of the result files
and of the report that do not use the report's own code."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from test_bench import SMALL_CEILINGS_ENV

from ring.bench.results import file_sha256
from ring.bench.seed_cpp.build import compiler_problem

ROOT = Path(__file__).resolve().parent.parent
NSYS_FIXTURE = ROOT / "tests" / "fixtures" / "nsys" / "cpu2022"
ARTIFACTS = Path(os.environ.get("RING_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
BENCH = ["-b", "1K", "-e", "64K", "-f", "4", "-n", "3", "-w", "1", "--seed", "1"]
# The cpu sweep's backends as the workflow runs them (seed-cpp only where it can be built).
THREAD_BACKENDS = ("numpy-direct",) + (("seed-cpp",) if compiler_problem() is None else ())


def run_bench(out: Path, *args: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "ring.bench", *BENCH, *args, "--out", str(out)]
    env = {**os.environ, **SMALL_CEILINGS_ENV}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    return out


SCREEN = ["--backend", "cpu,numpy-direct", "--algorithm", "ring,direct,reduce-broadcast",
          "--executor", "nodes,slices", "--rounds", "3", "--out-of-place", "0"]  # fmt: skip


def run_tool(*argv: str, timeout: float = 300) -> None:
    """``python -m ARGV`` from the project root with the tests' small ceilings; must pass."""
    env = {**os.environ, **SMALL_CEILINGS_ENV}
    command = [sys.executable, "-m", *argv]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def make_results(root: Path, nodes=(2, 4)) -> Path:
    """``results/`` as the workflow lays it out, on tiny sizes: the cpu sweeps (in and out
    of place, both syncs), the screen at N = 2, its finalists and their confirmation in 3
    launches, one size alone (as the original study's size), the model's fit and a profile."""
    cpu = root / "cpu"
    for n in nodes:
        run_bench(
            cpu / f"sweep_n{n}_float32.csv",
            *("--backend", ",".join(["cpu", *THREAD_BACKENDS]), "--nodes", str(n)),
            *("--sync", "pairwise,barrier", "-a", "3"),
        )
    screen = run_bench(cpu / "algorithms_n2_float32.csv", *SCREEN, "--nodes", "2")
    finalists = cpu / "finalists_n2_float32.json"
    run_tool("ring.bench", "finalists", str(screen), "--out", str(finalists))
    run_tool(
        *("ring.bench", "launches", "--launches", "3", "--finalists", str(finalists)),
        *("--out", str(cpu / "confirm_n2_float32.csv"), "--", *BENCH, *SCREEN, "--nodes", "2"),
    )
    run_bench(
        cpu / "original_n2_float32.csv",
        *("--backend", "cpu,numpy-direct", "--nodes", "2", "-b", "256K", "-e", "256K"),
        *("--executor", "nodes,slices", "--out-of-place", "0"),
    )
    run_tool("ring.model", "fit", "--variants", str(screen), "--out", str(cpu / "model_fit.json"))
    run_tables(root / "profiles" / "cpu")
    return root


def run_report(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m ring.report ARGS`` from the project root, its output captured."""
    command = [sys.executable, "-m", "ring.report", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def run_tables(profile_dir: Path) -> Path:
    csvs = sorted(str(p) for p in NSYS_FIXTURE.glob("*.csv"))
    for command in (
        ["tables", "--out", str(profile_dir / "tables"), *csvs],
        ["summary", str(profile_dir / "tables"), "--out", str(profile_dir / "summary.md")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "ring.nsys", *command],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stderr
    return profile_dir


# --- reading the result files independently of the report --------------------------------


def sweep_csvs(folder: Path) -> list[Path]:
    """The result CSVs of a folder, without the per-call samples beside them."""
    return sorted(p for p in folder.glob("*.csv") if not p.name.endswith(".samples.csv"))


def csv_rows(results: Path) -> list[dict]:
    rows = []
    for path in sweep_csvs(results / "cpu"):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                row["run"] = path.stem
                for key in ("nodes", "bytes", "wrong"):
                    row[key] = int(row[key])
                for key in ("time_us", "busbw_GBps", "traffic_GBps", "algbw_GBps"):
                    row[key] = float(row[key])
                rows.append(row)
    return rows


def label(row: dict) -> str:
    return row["backend"] if row["sync"] == "none" else f"{row['backend']} {row['sync']}"


def rows_time(rows: list[dict], name: str, nodes: int, size_: int) -> float:
    return times(rows, name, nodes)[size_]


def times(rows: list[dict], name: str, nodes: int) -> dict[int, float]:
    return {r["bytes"]: r["time_us"] for r in rows if label(r) == name and r["nodes"] == nodes}


# --- reading the report ---------------------------------------------------------------


def md_table(text: str, title: str) -> list[dict]:
    """The Markdown table under the heading ``title`` (any level) as a list of {header: cell}."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip("#") == f" {title}") + 1
    while not lines[start].startswith("|"):
        start += 1
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    header, body = table[0], table[2:]
    # A repeated header ("at") gets a suffix: "at", "at#2".
    header = [h if header[:i].count(h) == 0 else f"{h}#{header[:i].count(h) + 1}"
              for i, h in enumerate(header)]  # fmt: skip
    return [dict(zip(header, row, strict=True)) for row in body]


def number(cell: str) -> float:
    return float(cell.replace(",", "").rstrip("×%").strip())


def size(cell: str) -> int:
    value, unit = cell.split()
    scale = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]
    return int(value.replace(",", "")) * scale


def close(shown: str, value: float) -> bool:
    """``shown`` is ``value`` to three significant digits (the report's rounding)."""
    return math.isclose(number(shown), value, rel_tol=5.01e-3)


def rehash(csv_path: Path) -> None:
    """Make the JSON beside an edited result CSV name it (``csv_sha256``), as a harness
    that had measured those rows would: the readers refuse a CSV their JSON does not name."""
    json_path = Path(csv_path).with_suffix(".json")
    document = json.loads(json_path.read_text())
    document["csv_sha256"] = file_sha256(csv_path)
    json_path.write_text(json.dumps(document, indent=2) + "\n")
