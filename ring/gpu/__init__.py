"""The CuPy backend: one device per logical node (:mod:`ring.gpu.communicator`), its devices,
kernels, streams and CUDA graphs (the other modules of this package)."""

from .communicator import (
    OPTIONS,
    PER_CALL_OPTIONS,
    DeviceUnavailableError,
    GpuCommunicator,
    GpuWork,
    cache_key,
    check_call,
    device_count,
    enable_peer_access,
    import_cupy,
    make_communicator,
    node_devices,
    queued_call,
)

__all__ = [
    "OPTIONS",
    "PER_CALL_OPTIONS",
    "DeviceUnavailableError",
    "GpuCommunicator",
    "GpuWork",
    "cache_key",
    "check_call",
    "device_count",
    "enable_peer_access",
    "import_cupy",
    "make_communicator",
    "node_devices",
    "queued_call",
]
