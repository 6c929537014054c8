"""The workflow's configuration check (ring.study.config): every bound the code has, each
problem in one line naming the key and what is allowed."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ring.schedule import ALGORITHMS
from ring.study.config import ConfigError, check_config

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
DEFAULT = yaml.safe_load((ROOT / "config/config.yaml").read_text())


def merged(override: dict) -> dict:
    """config.yaml with ``override`` merged in, as Snakemake merges a --configfile."""
    config = copy.deepcopy(DEFAULT)

    def merge(into, changes):
        for key, value in changes.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value

    merge(config, override)
    return config


BAD = {
    "nodes above 1024": ({"cpu": {"nodes": [2, 1025]}}, "cpu.nodes.1: 1025 is greater than"),
    "min_bytes 0": ({"bench": {"min_bytes": 0}}, "min_bytes 0 holds no float32 element"),
    "min_bytes below a float32": ({"bench": {"min_bytes": 2}}, "use at least 4"),
    "complex with max": (
        {"bench": {"op": "max", "dtypes": ["complex64"]}},
        "op 'max' with complex64",
    ),
    "max_bytes 100G": ({"bench": {"max_bytes": "100G"}}, "above the workflow's maximum of 64G"),
    "profile nodes 5000": (
        {"nsys": {"profiles": {"cpu": {"nodes": 5000}}}},
        "nsys.profiles.cpu.nodes: 5000 is greater than the maximum of 1024",
    ),
    "profile bytes 900G": (
        {"nsys": {"profiles": {"cpu": {"bytes": "900G"}}}},
        "nsys.profiles.cpu.bytes 900G is above",
    ),
    "empty launcher": ({"mpi": {"launcher": "  "}}, "mpi.launcher: '  ' does not match"),
    "typo'd key": ({"cpu": {"nodez": [2]}}, "'nodez' was unexpected); allowed keys: backends"),
    "typo'd top-level key": (
        {"bnech": {}},
        "allowed keys: algorithms, bench, compare, confirm, cpu",
    ),
    "bad size": ({"bench": {"max_bytes": "64X"}}, "expected bytes per node buffer"),
    "min above max": (
        {"bench": {"min_bytes": "1M", "max_bytes": "1K"}},
        "min_bytes 1M above max_bytes 1K",
    ),
    "seed-cpp with float16": (
        {"bench": {"dtypes": ["float32", "float16"]}},
        "cpu.backends seed-cpp is compiled for float32, float64, int32, int64 only, not float16",
    ),
    "gpu profile nodes": ({"nsys": {"profiles": {"4gpu": {"nodes": 2}}}}, "profiles 4 nodes"),
    "name of a results folder": ({"name": "cpu"}, "name 'cpu' is a folder of results/ itself"),
    "name with a slash": ({"name": "a/b"}, "name: 'a/b' does not match"),
    "op mean": ({"bench": {"op": "mean"}}, "bench.op: 'mean' is not one of ['sum', "),
    "unknown algorithm": (
        {"algorithms": {"names": ["ring", "rign"]}},
        "algorithms.names.1: 'rign' is not one of ['ring', 'ring-segmented'",
    ),
    "algorithm sweep of no kind": ({"algorithms": {"kinds": ["tpu"]}}, "'tpu' is not one of"),
    "unknown executor": (
        {"algorithms": {"executors": ["nodes", "threads"]}},
        "algorithms.executors.1: 'threads' is not one of ['nodes', 'slices']",
    ),
    "algorithm sweep above the maximum": (
        {"algorithms": {"max_bytes": "65G"}},
        "algorithms.max_bytes 65G is above the workflow's maximum",
    ),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_config_is_one_line_naming_the_key(case):
    override, text = BAD[case]
    with pytest.raises(ConfigError) as caught:
        check_config(merged(override), SCHEMA)
    message = str(caught.value)
    assert text in message
    assert "\n" not in message and message.startswith("config: ")


@pytest.mark.parametrize("name", ["config.yaml", "full.yaml", "ci.yaml"])
def test_shipped_configs_pass(name):
    config = merged(yaml.safe_load((ROOT / "config" / name).read_text()) or {})
    check_config(config, SCHEMA)


def test_schema_takes_every_op_the_harness_takes():
    from ring.ops import ARITHMETIC

    schema = yaml.safe_load(SCHEMA.read_text())
    assert schema["$defs"]["sweep"]["properties"]["op"]["enum"] == list(ARITHMETIC)
    check_config(merged({"bench": {"op": "avg", "dtypes": ["float32", "float64"]}}), SCHEMA)


def test_algorithm_names_are_the_librarys():
    schema = yaml.safe_load(SCHEMA.read_text())
    names = schema["properties"]["algorithms"]["properties"]["names"]["items"]["enum"]
    assert names == list(ALGORITHMS)
    # The shipped configurations measure every one of them.
    for name in ("config.yaml", "full.yaml"):
        config = merged(yaml.safe_load((ROOT / "config" / name).read_text()) or {})
        assert config["algorithms"]["names"] == list(ALGORITHMS)


def test_executors_are_the_cpu_backends():
    from ring.cpu import EXECUTORS

    schema = yaml.safe_load(SCHEMA.read_text())
    executors = schema["properties"]["algorithms"]["properties"]["executors"]["items"]["enum"]
    assert executors == list(EXECUTORS)
    # Every shipped configuration, the tests' tiny one included, measures both.
    for name in ("config.yaml", "full.yaml", "ci.yaml"):
        config = merged(yaml.safe_load((ROOT / "config" / name).read_text()) or {})
        assert config["algorithms"]["executors"] == list(EXECUTORS)
