"""The backend contract and the planning layer, read from the code (``ast``) and run: the API
dispatches through ring.communicator.Backend without probing a backend module, no module of ring
touches another module's private names, and the trial race has one home that the cpu, mpi
and gpu planners all use (the gpu's run under the CUDA stand-in)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from fakecuda import FakeCuda, fake_cupy
from reference import check, random_inputs

import ring
import ring.communicator
from ring.gpu import GpuCommunicator
from ring.planning import race, store
from ring.planning.candidates import table_candidates

RING = Path(__file__).resolve().parents[1] / "ring"


def _tree(relative: str) -> ast.Module:
    return ast.parse((RING / relative).read_text())


def test_the_api_probes_no_backend_attribute():
    tree = _tree("api.py")
    probes = sorted(
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr", "setattr", "__import__")
    )
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert probes == [] and "importlib" not in imported


def _defined_private(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, globals, attributes it
    assigns (``self._x = ...``, class bodies) and ``__slots__``."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _private_reach_ins(relative: str) -> list[str]:
    """``x._name`` (x not self or cls) where no module of ring but another defines
    ``_name``, and ``from m import _name`` of a module of ring."""
    tree = _tree(relative)
    mine = _defined_private(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "") == "ring"):
            found += [
                f"import {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            and node.attr not in mine
            and node.attr in _RING_PRIVATE
        ):
            found.append(f"{ast.unparse(node)} (line {node.lineno})")
    return found


_MODULES = sorted(p.relative_to(RING).as_posix() for p in RING.rglob("*.py"))
_RING_PRIVATE = set().union(*(_defined_private(_tree(m)) for m in _MODULES))


@pytest.mark.parametrize("relative", _MODULES)
def test_no_module_touches_another_modules_private_names(relative):
    assert _private_reach_ins(relative) == []


def test_the_trial_race_has_one_home_that_every_backend_plans_with():
    homes = [
        m
        for m in _MODULES
        for node in ast.walk(_tree(m))
        if isinstance(node, ast.ClassDef) and node.name == "Trial"
    ]
    assert homes == ["planning/race.py"]
    for backend in ("cpu", "mpi", "gpu"):
        imported = {
            node.module
            for node in ast.walk(_tree(f"{backend}/planning.py"))
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert {"planning", "planning.candidates"} <= imported, backend


def test_backends_are_registered_by_name():
    for name in ("cpu", "mpi", "gpu"):
        assert ring.communicator.registered(name).name == name
    with pytest.raises(ValueError, match="unknown backend 'tpu'"):
        ring.allreduce([np.ones(2)], backend="tpu")


def test_cpu_options_are_checked_once_into_a_frozen_object():
    cpu = ring.communicator.registered("cpu")
    options = cpu.options(2, {"algorithm": "auto", "executor": "slices"})
    assert options.algorithm == "auto" and options.executor == "slices"
    assert options.inline_bytes is None  # not given: auto plans it
    with pytest.raises(AttributeError):
        options.algorithm = "ring"  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown sync"):
        cpu.options(2, {"sync": "never"})


@pytest.mark.parametrize("nodes", [2, 3])
def test_the_gpu_plans_auto_by_measuring_under_the_cuda_stand_in(nodes):
    """Every call of the trial is right (float64 reference, an awkward length), the plan
    is one of the table's candidates and lands in the wisdom as the gpu's."""
    rng = np.random.default_rng(nodes)
    name, count = "allreduce", 1009
    sim = FakeCuda(nodes, seed=nodes)
    with fake_cupy(sim):
        comm = GpuCommunicator(nodes, algorithm="auto", graphs=False)
        candidates = table_candidates("gpu", name, nodes, count * 8)
        key = race.shape_key("gpu", name, nodes, np.dtype(np.float64).str, "sum", count * 8, ())
        for _ in range((race.REPEATS + 1) * len(candidates) + 1):  # the most a trial takes
            inputs = random_inputs(rng, nodes, count, np.float64, "sum")
            buffers = [sim.to_device(x, comm.devices[i]) for i, x in enumerate(inputs)]
            comm.allreduce(buffers, "sum")
            for buf in buffers:
                check(sim.to_host(buf), inputs, "sum")
        comm.close()
    plan = store.wisdom().get(key)
    assert plan is not None and plan[0] in candidates
    path = store.wisdom_path()
    if path is not None:
        kept = json.loads(path.read_text())["plans"][key]
        assert kept["backend"] == "gpu" and len(kept["seconds"]) >= 2
