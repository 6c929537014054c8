"""Which CUDA devices the GPU ring's nodes run on, and the checks before any of them is used.

Split from :mod:`ring.gpu` so the communicator module holds only the ring itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._optional import require
from ..schedule import check_algorithm, check_algorithm_options

__all__ = [
    "ALGORITHM_OPTIONS",
    "OPTIONS",
    "DeviceUnavailableError",
    "check_algorithm_choice",
    "check_options",
    "check_streams",
    "device_count",
    "enable_peer_access",
    "import_cupy",
    "node_devices",
]

# The options every call may override (compared with the call's collective).
ALGORITHM_OPTIONS = ("algorithm", "segment_bytes", "group_size")
OPTIONS = (
    "devices",
    "shared_devices",
    "force_peer_copies",
    "graphs",
    "streams",
    *ALGORITHM_OPTIONS,
)

# cudaErrorPeerAccessAlreadyEnabled: another library (or CuPy itself) got there first.
_PEER_ACCESS_ALREADY_ENABLED = 704
_FEATURE = "the GPU backend (ring.gpu)"


class DeviceUnavailableError(RuntimeError):
    """CuPy is installed but no CUDA device can be used."""


def import_cupy():
    """CuPy, or an error that says it is missing and how to install it."""
    return require("cupy", _FEATURE)


def device_count() -> int:
    """How many CUDA devices CuPy sees; raises when CuPy or a usable device is missing."""
    cupy = import_cupy()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError, or a driver library that fails to load
        raise DeviceUnavailableError(
            f"{_FEATURE} needs a CUDA device, but CuPy found none usable ({exc}). "
            "Run on a machine with an NVIDIA GPU and its driver (nvidia-smi lists them); "
            "CuPy itself is installed with: pip install '.[gpu]'"
        ) from exc
    if count < 1:
        raise DeviceUnavailableError(
            f"{_FEATURE} needs a CUDA device, but CuPy reports 0 devices "
            "(is CUDA_VISIBLE_DEVICES empty?)"
        )
    return count


def check_options(options: dict) -> tuple[tuple[int, ...] | None, bool, bool, bool]:
    unknown = set(options) - set(OPTIONS)
    if unknown:
        raise TypeError(
            f"unknown option(s) for backend 'gpu': {', '.join(sorted(unknown))} "
            f"(expected {', '.join(OPTIONS)})"
        )
    devices = options.get("devices")
    if devices is not None:
        if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence):
            raise TypeError(f"devices must be a list of device ids, got {type(devices).__name__}")
        checked = []
        for d in devices:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
                raise TypeError(f"devices must hold integer device ids, got {d!r}")
            if d < 0:
                raise ValueError(f"device ids are >= 0, got {d}")
            checked.append(int(d))
        if not checked:
            raise ValueError("devices is empty: name at least one device")
        devices = tuple(checked)
    return (
        devices,
        _flag(options, "shared_devices", False),
        _flag(options, "force_peer_copies", False),
        _flag(options, "graphs", True),
    )


def check_streams(options: dict) -> int | None:
    """``streams``: CUDA streams per node, or None (the default) for the backend's choice
    per algorithm (:func:`ring.gpu.run.streams_for`)."""
    value = options.get("streams")
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"streams must be a whole number of streams per node, got {value!r}")
    if value < 1:
        raise ValueError(f"streams must be >= 1 (streams per node), got {value}")
    return int(value)


def check_algorithm_choice(options: dict, nodes: int, collective: str | None = None) -> dict:
    """``{"algorithm": ..., and its options}`` from ``options`` (the ring by default),
    checked against ``nodes`` and, when given, the collective."""
    algorithm = check_algorithm(options.get("algorithm", "ring"), collective)
    extra = {k: options[k] for k in ALGORITHM_OPTIONS[1:] if options.get(k) is not None}
    return {"algorithm": algorithm, **check_algorithm_options(algorithm, nodes, extra)}


def _flag(options: dict, name: str, default: bool) -> bool:
    value = options.get(name, default)
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def node_devices(
    nodes: int, devices: Sequence[int] | None, shared_devices: bool, available: int
) -> tuple[int, ...]:
    """The device of every node: ``devices[i]``, or round-robin over ``devices`` when
    ``shared_devices`` allows several nodes on one device."""
    hint = "pass shared_devices=True to place several nodes on one device, round-robin"
    if devices is None:
        if available >= nodes:
            devices = tuple(range(nodes))
        elif shared_devices:
            devices = tuple(range(available))
        else:
            raise ValueError(
                f"{nodes} nodes need {nodes} CUDA devices but this machine has {available}; " + hint
            )
    devices = tuple(devices)
    for d in devices:
        if d >= available:
            raise ValueError(
                f"device {d} does not exist: this machine has {available} CUDA device(s), "
                f"ids 0..{available - 1}"
            )
    if len(devices) > nodes:
        raise ValueError(f"{len(devices)} devices given for {nodes} nodes: name one per node")
    if not shared_devices:
        if len(devices) < nodes:
            raise ValueError(
                f"{nodes} nodes need {nodes} CUDA devices but only {len(devices)} were given "
                f"(this machine has {available}); " + hint
            )
        repeated = sorted({d for d in devices if devices.count(d) > 1})
        if repeated:
            raise ValueError(f"device(s) {repeated} are listed more than once; " + hint)
    return tuple(devices[i % len(devices)] for i in range(nodes))


def enable_peer_access(runtime, peer: int) -> None:
    """Let the current device access ``peer``'s memory directly."""
    ensure = getattr(runtime, "_deviceEnsurePeerAccess", None)
    if ensure is not None:
        # CuPy's own variant also clears CUDA's last-error slot when access was already
        # enabled, so no later cudaGetLastError (in any library) trips over it.
        ensure(peer)
        return
    try:
        runtime.deviceEnablePeerAccess(peer)
    except runtime.CUDARuntimeError as exc:
        if exc.status != _PEER_ACCESS_ALREADY_ENABLED:
            raise
