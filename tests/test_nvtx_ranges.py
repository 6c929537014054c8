"""ring.nvtx goes through nvtx's public API, with its attributes built once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FAKE_NVTX = """
calls = []


class annotate:
    def __init__(self, message=None, color=None, domain=None, category=None, payload=None):
        calls.append(("new", message, domain))
        self.message = message

    def __enter__(self):
        calls.append(("push", self.message))
        return self

    def __exit__(self, *exc):
        calls.append(("pop",))
        return False


def push_range(*args, **kwargs):
    raise AssertionError("nvtx.push_range rebuilds its attributes on every call")


pop_range = push_range
"""


def test_nvtx_ranges_use_reused_public_annotations(tmp_path):
    # A stand-in exposing only nvtx's public API: no nvtx._lib to reach into.
    code = (
        "import nvtx, ring.nvtx as r\n"
        "assert r.AVAILABLE\n"
        "del nvtx.calls[:]\n"
        "push = r.pusher('all_gather step 1 node 0')\n"
        "for _ in range(3):\n"
        "    push(); r.pop()\n"
        "with r.annotate('allreduce'):\n"
        "    pass\n"
        "print(nvtx.calls)\n"
    )
    out = _with_fake_nvtx(tmp_path, code, {"NVTX_INJECTION64_PATH": "/x.so"})
    step = "all_gather step 1 node 0"
    assert out == repr(
        [("new", step, "ring")]
        + [("push", step), ("pop",)] * 3
        + [("new", "allreduce", "ring"), ("push", "allreduce"), ("pop",)]
    )


def _with_fake_nvtx(tmp_path: Path, code: str, extra: dict) -> str:
    """What ``code`` prints in a fresh interpreter that imports the stand-in ``nvtx``, in
    this environment without NVTX_DISABLE or any sign of an NVTX tool, plus ``extra``."""
    (tmp_path / "nvtx").mkdir()
    (tmp_path / "nvtx" / "__init__.py").write_text(FAKE_NVTX)
    names = ("NVTX_DISABLE", "RING_NVTX", "NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH")
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(PYTHONPATH=str(tmp_path), **extra)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(
    "extra, recorded",
    [
        ({}, False),  # nvtx installed, no tool: every range a no-op
        ({"RING_NVTX": "0"}, False),
        ({"RING_NVTX": "1"}, True),  # a tool that injects itself some other way
        ({"NVTX_INJECTION64_PATH": "/x.so"}, True),  # what nsys sets
        ({"NVTX_INJECTION64_PATH": "/x.so", "NVTX_DISABLE": "1"}, False),
    ],
)
def test_ranges_are_pushed_only_where_a_tool_can_take_them(tmp_path, extra, recorded):
    code = (
        "import nvtx, ring.nvtx as r\n"
        "push = r.pusher('allreduce')\n"
        "push(); r.pop()\n"
        "print(r.AVAILABLE, nvtx.calls)\n"
    )
    out = _with_fake_nvtx(tmp_path, code, extra)
    # the pop's annotation, made at import; the range's, made once; its push and pop
    calls = [("new", None, "ring"), ("new", "allreduce", "ring"), ("push", "allreduce"), ("pop",)]
    assert out == f"{recorded} {calls if recorded else []}"


def test_nvtx_ranges_never_names_the_private_lib():
    import ring.nvtx

    assert "_lib" not in Path(ring.nvtx.__file__).read_text()


def test_cost_script_times_every_way_against_the_private_calls():
    pytest.importorskip("nvtx")
    script = Path(__file__).resolve().parent.parent / "scripts" / "nvtx_cost.py"
    env = {k: v for k, v in os.environ.items() if k != "NVTX_DISABLE"}
    done = subprocess.run(
        [sys.executable, str(script), "--number", "1000", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("nvtx 0.2.") and "1 timings of 1000 pairs" in lines[0]
    ways = {line.split("private  ", 1)[1] for line in lines[1:]}
    assert "private _lib.push_range/pop_range (partial)" in ways
    assert "public annotate(...).__enter__/__exit__ (ring.nvtx)" in ways
    assert "public nvtx.push_range/pop_range(domain=)" in ways
    assert " 1.00x private  private _lib" in done.stdout
