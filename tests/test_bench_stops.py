"""How the harness stops: a Ctrl-C anywhere exits 130 with one line (real SIGINTs, sent to a
harness in a subprocess); a failure mid-sweep keeps the sizes measured, written as a
partial result, and ends in one line; ``alternate`` refuses a launcher it cannot run
before round 1."""

from __future__ import annotations

import csv
import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from ctrl_c import let_children_see_sigint

import ring.bench.ceilings
from ring.bench.__main__ import main
from ring.bench.backends import CpuBackend, CpuSession, register_backend, unregister_backend
from ring.bench.parallel import usable_cores
from ring.bench.results import check_pair, samples_path
from ring.report.derive.model import ReportModel
from ring.report.load import load_inputs
from ring.report.words.caveats import caveats

let_children_see_sigint()

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _harness(code: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**ENV, **env},
    )


def _interrupted(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def _complete(path: Path) -> bool:
    """Whether a run wrote its CSV and the JSON whose hash names it."""
    json_path = path.with_suffix(".json")
    if not (path.is_file() and json_path.is_file()):
        return False
    document = json.loads(json_path.read_text())
    return check_pair(path, document, json_path) is None


# -- Ctrl-C ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(usable_cores() < 2, reason="the ceilings' pool needs two threads")
def test_ctrl_c_between_releasing_a_ceiling_worker_and_its_waking_exits_130(tmp_path):
    # The reproducer: a SIGINT right after the pool released a worker, before the worker
    # took its start (RuntimeError: release unlocked lock, exit 1).  The SIGINT is real,
    # sent by the harness to itself the moment the release returns.
    code = f"""
        import os, signal, sys
        import ring.bench.parallel as parallel
        from ring.bench.__main__ import main

        class Interrupting:
            def __init__(self, lock):
                self.lock, self.armed = lock, True
            def release(self):
                self.lock.release()
                if self.armed:
                    self.armed = False
                    os.kill(os.getpid(), signal.SIGINT)
            def __getattr__(self, name):
                return getattr(self.lock, name)

        real_run, runs = parallel.WorkerPool.run, []
        def run(self, fn, parts):
            runs.append(fn)
            if len(runs) == 3:  # the ceilings' kernels (the first run pins the threads)
                self._start[1] = Interrupting(self._start[1])
            return real_run(self, fn, parts)
        parallel.WorkerPool.run = run
        sys.exit(main(["-b", "1K", "-e", "4K", "--out", {str(tmp_path / "r.csv")!r}]))
    """
    for _ in range(3):
        code_, stderr = _interrupted(_harness(code, RING_CEILING_BYTES="4M"))
        assert code_ == 130, stderr
        assert stderr.strip().splitlines() == ["ring.bench: interrupted; no result file written"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_a_run_exits_130_in_one_line(tmp_path):
    # SIGINTs at moments spread over a run: its ceilings, its sweep, its writing.
    code = f"""
        import sys
        from ring.bench.__main__ import main
        print("started", flush=True)
        sys.exit(main(["-b", "1K", "-e", "1M", "-f", "4", "-n", "20",
                       "--out", {str(tmp_path / "r.csv")!r}]))
    """
    for delay in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8):
        process = _harness(code, RING_CEILING_BYTES="8M")
        assert process.stdout is not None
        assert process.stdout.readline() == "started\n"
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        returncode, stderr = _interrupted(process)
        if returncode == 0:
            continue  # it finished first
        if returncode == -signal.SIGINT and not stderr and _complete(tmp_path / "r.csv"):
            continue  # it finished, and the SIGINT came while Python itself was exiting
        assert returncode == 130, (delay, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ring.bench: interrupted"), stderr


# -- alternate -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "launcher, said",
    [("ring-no-such-launcher -x", "no program 'ring-no-such-launcher'"), ("mpirun 'a", "quot")],
)
def test_alternate_refuses_a_launcher_before_round_1(tmp_path, capsys, launcher, said):
    out = tmp_path / "cmp.csv"
    command = ["alternate", "--launcher", launcher, "--out", str(out), "--", "-b", "1K"]
    assert main(command) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no round ran
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ring.bench: error: --launcher"), lines
    assert said in lines[0]
    assert list(tmp_path.iterdir()) == []


# -- a failure mid-sweep -------------------------------------------------------------------


def _partial(out: Path, stopped_at: int, measured: list[int]) -> None:
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["partial"]["stopped_at_bytes"] == stopped_at
    assert "\n" not in document["partial"]["reason"]
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted({int(r["bytes"]) for r in rows}) == measured
    assert all(r["wrong"] == "0" for r in rows)
    assert check_pair(out, document) is None and samples_path(out).is_file()


class _FullAt256K(CpuSession):
    """The cpu backend on a disk that fills at 256 KiB: its buffers cannot be made."""

    def load(self, inputs) -> None:
        if inputs[0].nbytes >= 256 << 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().load(inputs)


def test_a_failure_mid_sweep_keeps_the_sizes_measured(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: 1 << 20)

    @register_backend
    class FullDisk(CpuBackend):
        name = "test-full-disk"

        def open(self, nodes, sync, config, world):
            return _FullAt256K(nodes, sync, config, world)

    out = tmp_path / "r.csv"
    try:
        code = main(["--backend", "test-full-disk", "-b", "1K", "-e", "1M", "-f", "4",
                     "-n", "3", "-w", "1", "--out", str(out)])  # fmt: skip
    finally:
        unregister_backend("test-full-disk")
    assert code == 3
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ring.bench: error: the sweep stopped at"), lines
    assert "262144 B" in lines[0] and "No space left on device" in lines[0]
    assert f"the 4 sizes measured before it are in {out}, marked partial" in lines[0]
    _partial(out, 262144, [1024, 4096, 16384, 65536])
    notes = caveats(ReportModel(load_inputs([out])))
    assert any(n.startswith("**Partial run.** Run r stopped at 256 KiB (OSError") for n in notes)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not found")
def test_a_full_shm_dir_mid_sweep_under_mpi_is_one_line_and_a_partial_result(tmp_path):
    # The reproducer: the MPI shared buffers' parts cannot be made from 256 KiB on (each
    # rank's files are limited to 256 KiB, as on a full RING_SHM_DIR): every rank printed
    # a traceback and the sizes measured were lost.
    pytest.importorskip("mpi4py")
    out = tmp_path / "r.csv"
    sweep = ["-b", "1K", "-e", "1M", "-f", "4", "-n", "3", "-w", "1", "--out", str(out)]
    harness = [sys.executable, "-m", "ring.bench", "--backend", "mpi", "--buffers", "shared"]
    harness += sweep
    rank = f"ulimit -f 256; exec {shlex.join(harness)}"
    env = {**ENV, "RING_CEILING_BYTES": "1M", "RING_SHM_DIR": str(tmp_path)}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(
        ["mpirun", "--oversubscribe", "-n", "2", "sh", "-c", rank],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    ours = [line for line in done.stderr.splitlines() if line.startswith("ring.bench")]
    assert len(ours) == 1 and "the sweep stopped at 262144 B" in ours[0], done.stderr
    assert "Traceback" not in done.stderr
    assert f"the 4 sizes measured before it are in {out}, marked partial" in ours[0]
    _partial(out, 262144, [1024, 4096, 16384, 65536])
