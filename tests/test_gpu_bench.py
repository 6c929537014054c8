"""The harness's ``gpu`` and ``nccl`` backends and the ``kernel-bw`` mode, run end to end on
the CUDA simulator of ``fakecuda`` (the same code a GPU runs, minus the GPU)."""

from __future__ import annotations

import csv
import json
import sys

import numpy as np
import pytest
from fakecuda import FakeCuda, FakeUfunc, fake_cupy

import ring.bench.ceilings
from ring.bench.__main__ import main as bench_main

SMALL = 64 << 10


@pytest.fixture(scope="module")
def plugins():
    """The plugin modules, imported (and so registered) only when these tests run."""
    import types

    import ring.bench.backends.gpu
    import ring.bench.backends.nccl
    import ring.bench.gpu_ceilings
    import ring.bench.kernel_bw

    return types.SimpleNamespace(
        gpu=ring.bench.backends.gpu,
        gpu_ceilings=ring.bench.gpu_ceilings,
        kernel_bw=ring.bench.kernel_bw,
        nccl=ring.bench.backends.nccl,
    )


@pytest.fixture(autouse=True)
def small_ceilings(monkeypatch, plugins):
    """Ceilings on 64 KiB buffers: the simulator moves bytes with NumPy."""
    monkeypatch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: SMALL)
    monkeypatch.setattr(plugins.gpu_ceilings, "ceiling_bytes", lambda max_bytes, itemsize: SMALL)
    monkeypatch.setattr(plugins.kernel_bw, "ceiling_bytes", lambda max_bytes, itemsize: SMALL)
    plugins.gpu_ceilings._ceiling_cache.clear()


def _read(out):
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return rows, json.loads(out.with_suffix(".json").read_text())


SWEEP = ["-b", "1K", "-e", "16K", "-f", "4", "-n", "3", "-w", "1"]


def _sweep(backend, nodes, out, *extra):
    return bench_main([*SWEEP, "--backend", backend, "--nodes", nodes, "--out", str(out), *extra])


def test_gpu_backend_sweep_on_separate_devices(tmp_path):
    out = tmp_path / "gpu.csv"
    with fake_cupy(FakeCuda(3, seed=1)):
        assert _sweep("gpu", "2,3", out) == 0
    rows, document = _read(out)
    assert {(r["backend"], r["sync"], r["nodes"]) for r in rows} == {
        ("gpu", "pairwise", "2"),
        ("gpu", "pairwise", "3"),
    }
    assert all(r["wrong"] == "0" and r["shared_devices"] == "false" for r in rows)
    assert {r["devices"] for r in rows} == {"0 1", "0 1 2"}
    assert all(float(r["time_us"]) > 0 and r["traffic_GBps"] for r in rows)
    # The communicator times its calls itself: no copy can join them, out of place is N/A.
    assert all(r["oop_time_us"] == r["oop_wrong"] == "" for r in rows)
    ceilings = document["ceilings"]
    assert set(ceilings["gpu_copy_GBps"]) == {"0", "1", "2"}
    assert set(ceilings["gpu_reduce_GBps"]) == {"0", "1", "2"}
    assert set(ceilings["gpu_peer_GBps"]) == {"0->1", "1->0", "0->2", "2->0", "1->2", "2->1"}
    assert set(ceilings["gpu_peer_bidir_GBps"]) == {"0<->1", "0<->2", "1<->2"}
    assert all(v > 0 for v in ceilings["gpu_peer_bidir_GBps"].values())
    assert ceilings["gpu_peer_access"]["0->1"] is True
    assert "copy_GBps" in ceilings  # the harness's CPU ceilings sit beside them


def test_gpu_backend_shares_a_device_only_when_asked(tmp_path, capsys):
    out = tmp_path / "gpu.csv"
    with fake_cupy(FakeCuda(1, seed=2)):
        assert _sweep("gpu", "2", out) == 2
        assert "--shared-devices 1" in capsys.readouterr().err
        assert _sweep("gpu", "2", out, "--shared-devices", "yes") == 2
        assert "--shared-devices must be 0 or 1" in capsys.readouterr().err
        assert not out.exists()
        assert _sweep("gpu", "1,4", out, "--shared-devices", "1") == 0
    rows, document = _read(out)
    assert document["config"]["options"]["shared_devices"] == "1"
    assert {r["nodes"]: r["shared_devices"] for r in rows} == {"1": "false", "4": "true"}
    assert {r["devices"] for r in rows} == {"0", "0 0 0 0"}
    assert all(r["wrong"] == "0" for r in rows)


def test_gpu_backend_forced_peer_copies_and_streams(tmp_path, capsys):
    """The invocation of scripts/gpu_check.sh's overlap line: ring and ring-segmented with
    --force-peer-copies 1 on one shared device, each row saying what it ran."""
    out = tmp_path / "gpu.csv"
    args = ["--shared-devices", "1", "--algorithm", "ring,ring-segmented"]
    with fake_cupy(FakeCuda(1, seed=3)):
        for bad, said in (("2", "--force-peer-copies must be 0 or 1"), ("x", "--streams takes")):
            flag = "--force-peer-copies" if bad == "2" else "--streams"
            assert _sweep("gpu", "2", out, *args, flag, bad) == 2
            assert said in capsys.readouterr().err
        assert not out.exists()
        assert _sweep("gpu", "2,4", out, *args, "--force-peer-copies", "1") == 0
        rows, _ = _read(out)
        assert all(r["wrong"] == "0" and r["force_peer_copies"] == "1" for r in rows)
        assert {(r["algorithm"], r["streams"]) for r in rows} == {
            ("ring", "1"),
            ("ring-segmented", "2"),
        }
        assert _sweep("gpu", "3", out, *args, "--streams", "3") == 0
        rows, _ = _read(out)
        assert {r["streams"] for r in rows} == {"3"} and all(r["wrong"] == "0" for r in rows)


def test_gpu_check_overlap_line_runs_as_written(tmp_path):
    """scripts/gpu_check.sh's ring vs ring-segmented line, its sizes made small: every flag
    it passes is the harness's, and both algorithms' rows come out."""
    import re
    import shlex
    from pathlib import Path

    script = (Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh").read_text()
    line = re.search(r'run "gpu overlap[^"]*" \d+ "\$PY" -m ring\.bench (.*?--out)', script, re.S)
    args = shlex.split(line.group(1).replace("\\\n", " "))[:-1]
    assert args[args.index("-b") + 1] == args[args.index("-e") + 1] == "256M"
    args[args.index("-b") + 1] = args[args.index("-e") + 1] = "4K"
    out = tmp_path / "overlap.csv"
    with fake_cupy(FakeCuda(1, seed=4)):
        assert bench_main([*args, "-n", "2", "-w", "2", "--out", str(out)]) == 0
    rows, _ = _read(out)
    assert {(r["nodes"], r["algorithm"]) for r in rows} == {
        (n, a) for n in ("2", "4") for a in ("ring", "ring-segmented")
    }
    assert all(r["wrong"] == "0" and r["force_peer_copies"] == "1" for r in rows)


def test_a_wrong_reduction_fails_the_run(tmp_path, monkeypatch):
    from fakecuda import RAW_KERNEL_OPS

    out = tmp_path / "gpu.csv"
    sim = FakeCuda(2, seed=3)
    # float32 sum runs our kernel (ring.gpu.kernels): break that one.
    monkeypatch.setitem(RAW_KERNEL_OPS, "sum", np.subtract)
    with fake_cupy(sim):
        assert _sweep("gpu", "2", out) == 1
    rows, document = _read(out)
    assert all(int(r["wrong"]) > 0 for r in rows)
    assert document["wrong_total"] > 0


def test_nccl_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    out = tmp_path / "nccl.csv"
    with fake_cupy(FakeCuda(4, seed=4)):
        assert _sweep("nccl", "1,2,4", out, "-o", "max") == 0
    rows, document = _read(out)
    assert {r["nodes"] for r in rows} == {"1", "2", "4"}
    assert all(r["backend"] == "nccl" and r["sync"] == "none" for r in rows)
    assert all(r["wrong"] == "0" and float(r["time_us"]) > 0 for r in rows)
    # Out of place: NCCL's own allReduce(send, recv), validated alike.
    assert all(r["oop_wrong"] == "0" and float(r["oop_time_us"]) > 0 for r in rows)
    assert document["backends"]["nccl"]["environment"]["NCCL_ALGO"] == "Ring"


@pytest.mark.parametrize(
    ("devices", "args", "message"),
    [
        (1, ["--nodes", "2"], "needs 2 CUDA devices (NCCL puts one rank on each)"),
        (2, ["--nodes", "2", "-d", "complex64"], "NCCL has no complex64"),
        (0, ["--nodes", "2"], "no CUDA-capable device"),
    ],
)
def test_nccl_refuses_what_it_cannot_run(tmp_path, capsys, devices, args, message):
    with fake_cupy(FakeCuda(devices)):
        assert bench_main(["--backend", "nccl", "--out", str(tmp_path / "x.csv"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_without_cupy_the_gpu_backends_say_how_to_install(tmp_path, monkeypatch, capsys, plugins):
    monkeypatch.setitem(sys.modules, "cupy", None)
    for backend in ("gpu", "nccl"):
        assert bench_main(["--backend", backend, "--out", str(tmp_path / "x.csv")]) == 2
        assert "pip install '.[gpu]'" in capsys.readouterr().err
    assert plugins.kernel_bw.main(["-e", "4K"]) == 2
    assert "pip install '.[gpu]'" in capsys.readouterr().err


def test_kernel_bw_sweep(tmp_path, capsys, plugins):
    out = tmp_path / "kernel.csv"
    with fake_cupy(FakeCuda(2, seed=5)):
        sweep = ["-b", "1K", "-e", "64K", "-f", "4", "-n", "4", "-w", "1", "--device", "1"]
        code = plugins.kernel_bw.main([*sweep, "-d", "float16", "-o", "prod", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    rows, document = _read(out)
    assert [int(r["bytes"]) for r in rows] == [1024, 4096, 16384, 65536]
    assert all(r["device"] == "1" and r["gpu_name"] == "Simulated GPU" for r in rows)
    assert all(r["wrong"] == "0" and r["dtype"] == "float16" and r["op"] == "prod" for r in rows)
    for r in rows:
        t = float(r["time_us"])
        assert float(r["kernel_GBps"]) == pytest.approx(3 * int(r["bytes"]) / t / 1e3, rel=1e-4)
        assert float(r["kernel_vs_copy"]) > 0
    assert document["mode"] == "kernel-bw"
    assert set(document["ceilings"]["gpu_copy_GBps"]) == {"1"}
    assert "kernel/" in capsys.readouterr().out


def test_kernel_bw_checks_the_kernel(tmp_path, plugins):
    sim = FakeCuda(1, seed=6)
    sim.module.add = FakeUfunc(sim, np.maximum)
    with fake_cupy(sim):
        assert (
            plugins.kernel_bw.main(["-e", "4K", "-n", "2", "--out", str(tmp_path / "k.csv")]) == 1
        )
    rows, _ = _read(tmp_path / "k.csv")
    # The broken ufunc is caught; our kernel, checked the same way, is right.
    assert {r["kernel"] for r in rows} == {"ring", "ufunc"}
    assert all((int(r["wrong"]) > 0) == (r["kernel"] == "ufunc") for r in rows)


def test_kernel_bw_checks_our_kernel_too(tmp_path, plugins, monkeypatch):
    from fakecuda import RAW_KERNEL_OPS

    monkeypatch.setitem(RAW_KERNEL_OPS, "sum", np.subtract)
    with fake_cupy(FakeCuda(1, seed=6)):
        args = ["-e", "4K", "-n", "2", "--kernel", "ring", "--out", str(tmp_path / "k.csv")]
        assert plugins.kernel_bw.main(args) == 1
    rows, document = _read(tmp_path / "k.csv")
    assert {r["kernel"] for r in rows} == {"ring"} and all(int(r["wrong"]) > 0 for r in rows)
    assert document["config"]["kernels"] == ["ring"]


def test_kernel_bw_measures_ours_and_the_ufunc_where_ours_covers(tmp_path, plugins, capsys):
    with fake_cupy(FakeCuda(1, seed=2)):
        for dtype, expected in (("float32", ["ring", "ufunc"]), ("complex64", ["ufunc"])):
            out = tmp_path / f"{dtype}.csv"
            assert (
                plugins.kernel_bw.main(["-e", "2K", "-n", "2", "-d", dtype, "--out", str(out)]) == 0
            )
            rows, _ = _read(out)
            assert [r["kernel"] for r in rows] == expected * 2  # per size: 1K, 2K
            # one copy per size, shared by the kernels measured at that size
            assert len({(r["bytes"], r["copy_time_us"]) for r in rows}) == 2
        assert plugins.kernel_bw.main(["-e", "2K", "--kernel", "fast"]) == 2
    assert "--kernel 'fast': unknown ['fast']" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "2"], "--device 2 does not exist"),
        (["-b", "2K", "-e", "1K"], "larger than"),
        (["-f", "1"], "step-factor must be > 1"),
        (["-d", "bool"], "unknown dtype"),
        (["-o", "max", "-d", "complex64"], "not defined for complex"),
        (["--out", "x.txt"], ".csv"),
    ],
)
def test_kernel_bw_bad_input(args, message, capsys, plugins):
    with fake_cupy(FakeCuda(1)):
        assert plugins.kernel_bw.main(["-e", "4K", *args]) == 2
    assert message in capsys.readouterr().err


def test_plugins_register_their_backends(plugins):
    from ring.bench.backends import available_backends

    backends = available_backends()
    assert backends["gpu"] is plugins.gpu.GpuRingBackend
    assert backends["nccl"] is plugins.nccl.NcclBackend


@pytest.mark.parametrize("seed", range(10))
def test_nccl_timed_region_starts_after_every_restore_and_ends_after_every_device(seed, plugins):
    from ring.bench.cli import parse_args

    config = parse_args(["-e", "4K", "--backend", "nccl"], ["nccl"], [])
    with fake_cupy(FakeCuda(3, seed=seed)):
        session = plugins.nccl.NcclBackend().open(3, "none", config, None)
        try:
            session.load([np.full(256, float(i + 1), np.float32) for i in range(3)])
            session.restore()
            session.timed_call()
            (elapsed,) = session.times()
            start, end = session._pending[0]
            assert all(event.time < start.time for event in session.restored)
            assert all(event.time < end.time for event in session.finished[1:])
            assert elapsed > 0
            for result in session.results():
                np.testing.assert_array_equal(result, np.full(256, 6.0, np.float32))
        finally:
            session.close()
