"""Compile ``seed_ring.cpp`` once per (source, compiler, flags, CPU) and load it with ctypes.

The library lands in ``$RING_CACHE/seed-cpp/<hash>/libseedring.so`` (default cache
``$XDG_CACHE_HOME/ring``, else ``~/.cache/ring``).  The hash covers everything that changes
the binary, including the CPU's feature flags because of ``-march=native``: a home folder
shared between machines never hands one CPU another's instructions.  A build writes a
temporary file and renames it, so concurrent first uses (two workflow jobs) never load a
half-written library.  ``CXX`` overrides the compiler command (default ``g++``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from functools import cache
from importlib import resources
from pathlib import Path

__all__ = [
    "FLAGS",
    "LIBRARY_NAME",
    "SeedBuildError",
    "build_library",
    "compiler_problem",
    "library_path",
    "load_library",
]

FLAGS = ("-O3", "-march=native", "-std=c++20", "-pthread", "-shared", "-fPIC")
LIBRARY_NAME = "libseedring.so"
SOURCE_NAME = "seed_ring.cpp"
INSTALL_HINT = "install it with: apt-get install g++ (GCC 11 or newer), or set CXX to one"
BUILD_TIMEOUT_S = 600


class SeedBuildError(RuntimeError):
    """The compiled peer cannot be built or loaded here; the message is one line."""


def compiler_command() -> list[str]:
    command = shlex.split(os.environ.get("CXX", "") or "g++")
    return command or ["g++"]


def compiler_problem() -> str | None:
    """Why no compiler can build the peer here (one phrase), or None when one is on PATH."""
    command = compiler_command()
    if shutil.which(command[0]) is None:
        return f"the C++20 compiler {command[0]!r} is not on PATH; {INSTALL_HINT}"
    return None


def source_text() -> bytes:
    return resources.files(__package__).joinpath(SOURCE_NAME).read_bytes()


def cache_root() -> Path:
    if os.environ.get("RING_CACHE"):
        return Path(os.environ["RING_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ring"


@cache
def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            return next((line for line in handle if line.startswith(("flags", "Features"))), "")
    except OSError:
        return ""


@cache
def _compiler_version(command: tuple[str, ...]) -> str:
    try:
        done = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SeedBuildError(
            f"cannot run the compiler {command[0]!r} ({exc}); {INSTALL_HINT}"
        ) from exc
    return done.stdout


def library_path() -> Path:
    """Where the library for this source, compiler, flags and CPU lives (built or not)."""
    command = compiler_command()
    digest = hashlib.sha256()
    digest.update(source_text())
    digest.update(b"\0")
    for part in (shutil.which(command[0]) or "", *command, *FLAGS):
        digest.update(part.encode())
        digest.update(b"\0")
    digest.update(_compiler_version(tuple(command)).encode())
    digest.update(_cpu_flags().encode())
    return cache_root() / "seed-cpp" / digest.hexdigest()[:16] / LIBRARY_NAME


def _first_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[0]


def build_library() -> Path:
    """The compiled library, built now if this cache has none; SeedBuildError otherwise."""
    problem = compiler_problem()
    if problem:
        raise SeedBuildError(problem)
    target = library_path()
    if target.is_file():
        return target
    command = compiler_command()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{LIBRARY_NAME}.", dir=target.parent)
        os.close(handle)
    except OSError as exc:
        raise SeedBuildError(f"cannot write the build cache {target.parent} ({exc})") from exc
    with resources.as_file(resources.files(__package__).joinpath(SOURCE_NAME)) as source:
        argv = [*command, *FLAGS, "-o", temporary, str(source)]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            Path(temporary).unlink(missing_ok=True)
            raise SeedBuildError(f"cannot run {command[0]!r} ({exc}); {INSTALL_HINT}") from exc
    if done.returncode != 0:
        Path(temporary).unlink(missing_ok=True)
        raise SeedBuildError(
            f"{command[0]} could not build {SOURCE_NAME} with {' '.join(FLAGS)}: "
            f"{_first_error(done.stderr + done.stdout)}; {INSTALL_HINT}"
        )
    os.chmod(temporary, 0o755)
    os.replace(temporary, target)
    return target


@cache
def _load(path: str) -> ctypes.CDLL:
    library = ctypes.CDLL(path)
    library.seed_allreduce.argtypes = [
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int,
        ctypes.c_int64,
        ctypes.c_int,
        ctypes.c_int,
    ]
    library.seed_allreduce.restype = ctypes.c_int
    int64_p = ctypes.POINTER(ctypes.c_int64)
    library.seed_chunk_range.argtypes = [ctypes.c_int64] * 3 + [int64_p, int64_p]
    library.seed_chunk_range.restype = None
    return library


def load_library() -> ctypes.CDLL:
    """The library (built first if needed), loaded once per process."""
    path = build_library()
    try:
        return _load(str(path))
    except OSError as exc:
        raise SeedBuildError(f"cannot load {path} ({exc}); delete it to rebuild") from exc
