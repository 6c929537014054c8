"""The workflow's configuration, checked in full before any job runs.

The JSON schema (``workflow/schemas/config.schema.yaml``) states each value's type and range;
this module applies it and then the bounds that relate values to each other or to the code
(a sweep's sizes hold at least one element of each dtype, an op is defined for each dtype,
no buffer beyond :data:`MAX_BUFFER_BYTES`, node counts the backends take).  Every problem is
reported in one or two lines that name the key and what is allowed, instead of the whole
schema; :class:`ConfigError` carries the message.

Snakemake runs this when it plans, possibly from an environment with Snakemake alone (its
own jsonschema and PyYAML, no NumPy): there the checks that need the library (an op for a
dtype, the compiled peer's dtypes) are left to the harness, which refuses the same input
with exit status 2 when the job starts.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "KINDS",
    "MAX_BUFFER_BYTES",
    "PROFILE_GPUS",
    "ConfigError",
    "algorithm_settings",
    "check_config",
    "confirm_settings",
    "profile_nodes",
    "results_dir",
    "size_bytes",
    "sweep_settings",
]

# The sweeps of the workflow and the keys each takes from `bench` unless it overrides them.
KINDS = ("cpu", "mpi", "gpu", "kernel_bw")
SWEEP_KEYS = (
    *("min_bytes", "max_bytes", "step_factor", "iters", "warmup"),
    *("check", "dtypes", "op", "seed", "timeout"),
)
# The largest per-node buffer the workflow takes: beyond what any machine here can hold per
# node, so a typo (100G for 100M) is stopped before the DAG is built, not mid-run.
MAX_BUFFER_BYTES = 64 << 30
# The GPU profiles and the N each profiles: the one place it is written (the name says it;
# the rules, the targets' descriptions and the report take it from here).
PROFILE_GPUS = {"2gpu": 2, "4gpu": 4}
# The folders of results/ itself: a configuration's name (its results/<name>/) cannot be one.
RESULT_FOLDERS = frozenset(
    {"cpu", "mpi", "gpu", "compare", "hosts", "profiles", "report", "figures", "logs"}
    | {"reference"}
)


class ConfigError(ValueError):
    """A configuration the workflow cannot run; the message is one or two lines."""


def size_bytes(value: object) -> int:
    """Bytes of a size written as 4096 or 4K/64M/1G, read as the harness reads ``-b``/``-e``."""
    from ..bench.flags import BenchInputError, parse_size

    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return parse_size(str(value))
    except BenchInputError as exc:
        raise ConfigError(f"config: {exc}") from None


def sweep_settings(config: Mapping, kind: str) -> dict:
    """The `bench` settings with the overrides of `kind` (cpu, mpi, gpu, kernel_bw)."""
    own = config[kind]
    return {key: own.get(key, config["bench"][key]) for key in SWEEP_KEYS}


def algorithm_settings(config: Mapping, kind: str) -> dict:
    """The settings of `kind`'s algorithm sweep: the kind's own, then the `algorithms`
    section's overrides (a lighter size range than the kind's sweep, typically)."""
    own = config["algorithms"]
    return {key: own.get(key, value) for key, value in sweep_settings(config, kind).items()}


def confirm_settings(config: Mapping, kind: str) -> dict:
    """The settings of `kind`'s confirmation launches: the screen's, then the `confirm`
    section's overrides (its iterations and rounds)."""
    own = config["confirm"]
    screen = algorithm_settings(config, kind)
    return {**screen, **{key: own[key] for key in (*SWEEP_KEYS, "rounds") if key in own}}


def results_dir(config: Mapping) -> str:
    """Where a configuration's results go: results/<name>/, or results/ without a name."""
    name = config.get("name")
    return f"results/{name}" if name else "results"


def _check_name(config: Mapping) -> None:
    if config.get("name") in RESULT_FOLDERS:
        raise ConfigError(
            f"config: name {config['name']!r} is a folder of results/ itself; "
            f"choose another than {', '.join(sorted(RESULT_FOLDERS))}"
        )


def _where(path) -> str:
    return ".".join(str(part) for part in path) or "(top level)"


def _schema_message(error) -> str:
    """One line for a jsonschema error: the key, what is wrong, what is allowed."""
    message = error.message
    if error.validator in ("additionalProperties", "unevaluatedProperties"):
        allowed = set(error.schema.get("properties", {}))
        if error.validator == "unevaluatedProperties":  # the sweeps: their own keys + bench's
            allowed |= set(SWEEP_KEYS)
        message += f"; allowed keys: {', '.join(sorted(allowed))}"
    elif error.validator in ("oneOf", "pattern") and error.schema.get("description"):
        message += f" (expected {error.schema['description']})"
    return f"config: {_where(error.absolute_path)}: {message}"


def _apply_schema(config: dict, schema: Mapping) -> None:
    import jsonschema

    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(config))
    # A key that fails its own check is also "unevaluated" by its object: name the failure.
    specific = [e for e in errors if e.validator != "unevaluatedProperties"]
    # best_match, without descending into a oneOf's branches: "not valid under any of the
    # given schemas" plus the schema's description says more than one branch's complaint.
    error = max(specific or errors, key=jsonschema.exceptions.relevance, default=None)
    if error is not None:
        raise ConfigError(_schema_message(error))
    for key, spec in schema.get("properties", {}).items():
        if "default" in spec:
            config.setdefault(key, spec["default"])


def _check_sweep(config: Mapping, kind: str, settings: dict | None = None) -> None:
    settings = sweep_settings(config, kind) if settings is None else settings
    low, high = size_bytes(settings["min_bytes"]), size_bytes(settings["max_bytes"])
    if low > high:
        raise ConfigError(
            f"config: {kind} sweep has min_bytes {settings['min_bytes']} above "
            f"max_bytes {settings['max_bytes']}"
        )
    if high > MAX_BUFFER_BYTES:
        raise ConfigError(
            f"config: {kind}.max_bytes {settings['max_bytes']} is above the workflow's "
            f"maximum of {MAX_BUFFER_BYTES >> 30}G per node buffer"
        )
    for dtype in settings["dtypes"]:
        itemsize = _itemsize(dtype)
        if low < itemsize:
            raise ConfigError(
                f"config: {kind}.min_bytes {settings['min_bytes']} holds no {dtype} element; "
                f"use at least {itemsize}"
            )
    if importlib.util.find_spec("numpy") is not None:
        _check_library_dtypes(config, kind, settings)


def _itemsize(dtype: str) -> int:
    """Bytes of one element of ``dtype``: from NumPy where it is installed, else from the
    name's bits (every dtype the workflow's schema allows says them: float32, int8, ...)."""
    if importlib.util.find_spec("numpy") is not None:
        import numpy as np

        return np.dtype(dtype).itemsize
    bits = re.fullmatch(r"[a-z]+(\d+)", dtype)
    return int(bits.group(1)) // 8 if bits else 1


def _check_library_dtypes(config: Mapping, kind: str, settings: dict) -> None:
    import numpy as np

    from ..ops import resolve_op

    for dtype in settings["dtypes"]:
        try:
            resolve_op(settings["op"], np.dtype(dtype))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"config: {kind}.op {settings['op']!r} with {dtype}: {exc}") from None
    if "seed-cpp" in config.get(kind, {}).get("backends", ()):
        from ..bench.seed_cpp import DTYPE_CODES

        refused = [dtype for dtype in settings["dtypes"] if dtype not in DTYPE_CODES]
        if refused:
            raise ConfigError(
                f"config: {kind}.backends seed-cpp is compiled for {', '.join(DTYPE_CODES)} "
                f"only, not {', '.join(refused)}"
            )


def profile_nodes(config: Mapping, name: str) -> int:
    """The N profile ``name`` runs: a GPU profile's from its name, the CPU profile's from
    the configuration."""
    return PROFILE_GPUS.get(name) or int(config["nsys"]["profiles"][name]["nodes"])


def _check_profiles(config: Mapping) -> None:
    for name, profile in config["nsys"]["profiles"].items():
        wanted = "cpu" if name == "cpu" else "gpu"
        if profile["backend"] != wanted:
            raise ConfigError(
                f"config: nsys profile {name!r} must use backend {wanted!r}, "
                f"not {profile['backend']!r}"
            )
        if name in PROFILE_GPUS and "nodes" in profile:
            raise ConfigError(
                f"config: nsys profile {name!r} profiles {PROFILE_GPUS[name]} nodes, as its "
                f"name says; leave out nodes (it is {profile['nodes']})"
            )
        if size_bytes(profile["bytes"]) > MAX_BUFFER_BYTES:
            raise ConfigError(
                f"config: nsys.profiles.{name}.bytes {profile['bytes']} is above the workflow's "
                f"maximum of {MAX_BUFFER_BYTES >> 30}G per node buffer"
            )


def check_config(config: dict, schema_path: str | Path) -> None:
    """Validate ``config`` (filling schema defaults); raise :class:`ConfigError` if it
    cannot run."""
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text(encoding="utf-8"))
    _apply_schema(config, schema)
    _check_name(config)
    # `compare` (alternated launches of the threaded ring and MPI_Allreduce) and `hosts`
    # (the MPI runs across emulated hosts) are optional.
    optional = [kind for kind in ("compare", "hosts") if kind in config]
    for kind in (*KINDS, *optional):
        _check_sweep(config, kind)
    if "algorithms" in config:  # optional, like `compare`
        for kind in config["algorithms"]["kinds"]:
            _check_sweep(config, "algorithms", algorithm_settings(config, kind))
    if "confirm" in config:
        _check_confirm(config)
    if "original" in config and size_bytes(config["original"]["bytes"]) > MAX_BUFFER_BYTES:
        raise ConfigError(
            f"config: original.bytes {config['original']['bytes']} is above the workflow's "
            f"maximum of {MAX_BUFFER_BYTES >> 30}G per node buffer"
        )
    _check_profiles(config)


def _check_confirm(config: Mapping) -> None:
    """A confirmation needs the screens it confirms: `algorithms` over cpu or mpi."""
    kinds = [k for k in config.get("algorithms", {}).get("kinds", ()) if k in ("cpu", "mpi")]
    if not kinds:
        raise ConfigError(
            "config: confirm confirms the algorithm runs' picks: give `algorithms` with "
            "kinds cpu or mpi, or leave confirm out"
        )
    for kind in kinds:
        _check_sweep(config, "confirm", confirm_settings(config, kind))
