"""Whether the MPI library can take CUDA device pointers (CUDA-aware MPI), and the CuPy
that device buffers then need.

Split from :mod:`ring.mpi` because it probes the MPI library, not the ring: the loaded
``libmpi``'s ``MPIX_*`` queries, or ``ompi_info``.  The harness asks it too, before it
allocates device buffers (``--buffers device``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import subprocess
from functools import lru_cache

import numpy as np

from .._optional import require

__all__ = ["CUDA_AWARE_ENV", "cuda_aware", "device_backend", "import_mpi", "is_device_array"]

# Set to 1 or 0 to override CUDA-awareness detection (e.g. for MPI libraries that do not
# export Open MPI's MPIX_Query_cuda_support).
CUDA_AWARE_ENV = "RING_MPI_CUDA_AWARE"
_MPIX_GPU_SUPPORT_CUDA = 0  # MPICH's enum value for CUDA


def import_mpi():
    """``mpi4py.MPI``, or an error that says it is missing and how to install it."""
    return require("mpi4py.MPI", "the MPI backend (backend='mpi')")


def _loaded_libmpi() -> list[str]:
    """Paths of the libmpi this process has mapped (Linux), else the linker's guess."""
    paths: list[str] = []
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rsplit(None, 1)[-1]
            name = os.path.basename(path)
            if name.startswith("libmpi.so") and path not in paths:
                paths.append(path)
    found = ctypes.util.find_library("mpi")
    if found and found not in paths:
        paths.append(found)
    return paths


def _query_mpix() -> tuple[bool, str] | None:
    for path in _loaded_libmpi():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        with contextlib.suppress(AttributeError):  # Open MPI >= 2.0
            query = library.MPIX_Query_cuda_support
            query.restype, query.argtypes = ctypes.c_int, []
            answer = bool(query())
            return answer, f"MPIX_Query_cuda_support() returned {int(answer)}"
        with contextlib.suppress(AttributeError):  # MPICH >= 4.0
            query = library.MPIX_GPU_query_support
            query.restype = ctypes.c_int
            query.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
            flag = ctypes.c_int(0)
            if query(_MPIX_GPU_SUPPORT_CUDA, ctypes.byref(flag)) == 0:
                answer = bool(flag.value)
                return answer, f"MPIX_GPU_query_support(CUDA) said {int(answer)}"
    return None


def _query_ompi_info() -> bool | None:
    ompi_info = shutil.which("ompi_info")
    if ompi_info is None:
        return None
    try:
        out = subprocess.run(
            [ompi_info, "--parsable", "--all"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if line.startswith("mca:mpi:base:param:mpi_built_with_cuda_support:value:"):
            return line.rsplit(":", 1)[1].strip() == "true"
    return None


@lru_cache(maxsize=1)
def cuda_aware() -> tuple[bool, str]:
    """Whether the MPI library can take CUDA device pointers, and how that was decided.

    In order: the ``RING_MPI_CUDA_AWARE`` environment variable (``1``/``0``); Open MPI's
    ``MPIX_Query_cuda_support()`` in the loaded libmpi (true only when the library was built
    with CUDA *and* its CUDA support is enabled at run time), or MPICH's
    ``MPIX_GPU_query_support``; ``ompi_info --parsable --all``
    (``mpi_built_with_cuda_support:value``).  Unknown counts as not CUDA-aware.
    """
    forced = os.environ.get(CUDA_AWARE_ENV)
    if forced is not None and forced.strip() in ("0", "1"):
        return forced.strip() == "1", f"{CUDA_AWARE_ENV}={forced.strip()}"
    import_mpi()  # MPIX_Query_cuda_support needs MPI initialised
    found = _query_mpix()
    if found is not None:
        return found
    answer = _query_ompi_info()
    if answer is not None:
        return answer, f"ompi_info reports mpi_built_with_cuda_support={str(answer).lower()}"
    return False, "neither MPIX_Query_cuda_support nor ompi_info could tell"


def is_device_array(buf) -> bool:
    """Whether ``buf`` is a device (CUDA) array rather than a NumPy one."""
    return not isinstance(buf, np.ndarray) and hasattr(buf, "__cuda_array_interface__")


def device_backend():
    """``(cupy, cupy.ndarray)`` once device buffers are known to be usable, else raise."""
    aware, how = cuda_aware()
    if not aware:
        raise RuntimeError(
            "CuPy (device) buffers need a CUDA-aware MPI library, and this one is not "
            f"({how}); use NumPy buffers, or an MPI built with CUDA support (check with "
            "`ompi_info --parsable --all | grep mpi_built_with_cuda_support:value`; set "
            f"{CUDA_AWARE_ENV}=1 if your library is CUDA-aware but not detected)"
        )
    cupy = require("cupy", "the MPI backend with device buffers")
    return cupy, cupy.ndarray
