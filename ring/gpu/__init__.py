"""The CuPy backend: one device per logical node (:mod:`ring.gpu.communicator`), its devices,
kernels, streams and CUDA graphs (the other modules of this package)."""

from .communicator import (
    OPTIONS,
    DeviceUnavailableError,
    GpuCommunicator,
    cache_key,
    check_call,
    device_count,
    enable_peer_access,
    import_cupy,
    make_communicator,
    node_devices,
)

__all__ = [
    "OPTIONS",
    "DeviceUnavailableError",
    "GpuCommunicator",
    "cache_key",
    "check_call",
    "device_count",
    "enable_peer_access",
    "import_cupy",
    "make_communicator",
    "node_devices",
]
