"""Finding ``nsys``, telling its report-name generation, and running it.

Nsight Systems renamed its ``nsys stats`` reports in 2023.1 (``nvtxsum`` became
``nvtx_sum``, ``gpumemtimesum`` became ``cuda_gpu_mem_time_sum`` ...).  An unknown
report name makes ``nsys stats`` print an error and still exit 0, so the generation is
read off ``nsys stats --help-reports`` (falling back to the version) before any report
is asked for.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..machine import count_gpus
from .names import REPORTS, TRACE_REPORTS

__all__ = [
    "INSTALL_HINT",
    "GpuNotFoundError",
    "NsysError",
    "NsysInfo",
    "NsysNotFoundError",
    "count_gpus",
    "detect_nsys",
    "export_stats",
    "profile_command",
    "profile_paths",
    "report_names",
    "require_gpus",
    "require_nsys",
]

INSTALL_HINT = (
    "install it with 'sudo sh scripts/install_nsys.sh' (Debian 12) or put the nsys of "
    "your CUDA toolkit on PATH"
)

# Where an nsys may be when none is on PATH, newest version first within each pattern:
# Nsight Compute ships a full Nsight Systems CLI (the lent H200 machine had only that),
# as do the CUDA toolkit and the standalone installer.
SEARCH_PATTERNS = (
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
)

GENERATIONS = ("2022", "2023")
_VERSION = re.compile(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")


class NsysError(RuntimeError):
    """``nsys`` ran but did not do what was asked."""


class NsysNotFoundError(NsysError):
    """No usable ``nsys`` on this machine."""


class GpuNotFoundError(RuntimeError):
    """A GPU profile was requested on a machine without enough CUDA GPUs."""


@dataclass(frozen=True)
class NsysInfo:
    path: str
    version: str  # e.g. "2022.4.2.1"
    generation: str  # "2022" (old report names) or "2023" (new ones)
    reports: tuple[str, ...]  # report names ``--help-reports`` lists (may be empty)
    # What would stop ``nsys profile`` from importing its capture into a report, each a
    # line saying how to fix it (see importer_problems).
    importer: tuple[str, ...] = ()

    def describe(self) -> str:
        names = ", ".join(report_names(self.generation).values())
        text = (
            f"nsys {self.version} at {self.path}; report names of the "
            f"{self.generation} generation ({names})"
        )
        for line in self.importer:
            text += f"\n  importer: {line}"
        return text


def _run(argv: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)


def _version_year(version: str) -> int | None:
    match = _VERSION.search(version)
    return int(match.group(1)) if match else None


def generation_from_reports(listing: str) -> str | None:
    """The generation that ``nsys stats --help-reports`` output belongs to, if it tells."""
    names = set(re.findall(r"^\s*([a-z_0-9]+)(?=[\[\s]|$)", listing, flags=re.MULTILINE))
    if "nvtx_sum" in names or "cuda_gpu_kern_sum" in names:
        return "2023"
    if "nvtxsum" in names or "gpukernsum" in names:
        return "2022"
    return None


def find_nsys(nsys: str | None = None, patterns: Sequence[str] | None = None) -> str | None:
    """``nsys`` (a name or path), else ``$NSYS``, else ``nsys`` on PATH, else the newest
    match of ``patterns`` (only when nothing was named; default :data:`SEARCH_PATTERNS`,
    or ``$RING_NSYS_SEARCH``, a list joined by ``os.pathsep``, empty to search nowhere)."""
    named = nsys or os.environ.get("NSYS")
    path = shutil.which(named or "nsys")
    if path is not None or named:
        return path
    if patterns is None:
        env = os.environ.get("RING_NSYS_SEARCH")
        patterns = SEARCH_PATTERNS if env is None else [p for p in env.split(os.pathsep) if p]
    for pattern in patterns:
        found = sorted(glob.glob(pattern), key=_version_key, reverse=True)
        found = [p for p in found if os.access(p, os.X_OK)]
        if found:
            return found[0]
    return None


def _version_key(path: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", path))


def importer_problems(nsys_path: str, ldd: str | None = None) -> tuple[str, ...]:
    """Why ``nsys profile`` would write only a ``.qdstrm`` here, each with its fix.

    nsys runs ``QdstrmImporter`` from ``host-linux-x64/`` beside its own folder.  Nsight
    Compute's and Debian's packages put it elsewhere (``linux-desktop-glibc_2_11_3-x64/``,
    ``/usr/lib/nsight-systems/host-linux-x64/``): a symbolic link fixes that.  The importer
    also needs libraries the machine may lack (libdw.so.1, libelf.so.1 on the H200 machine;
    ``ldd`` names them).  See ``NSYS.md`` in the shared notes for the recipe that worked.
    """
    base = Path(os.path.realpath(nsys_path)).parent.parent
    expected = base / "host-linux-x64"
    importer = expected / "QdstrmImporter"
    if not importer.is_file():
        for candidate in (
            base / "linux-desktop-glibc_2_11_3-x64",
            Path("/usr/lib/nsight-systems/host-linux-x64"),
        ):
            if (candidate / "QdstrmImporter").is_file():
                return (f"{importer} is missing; link it: ln -sfn {candidate} {expected}",)
        return (f"{importer} is missing and no other QdstrmImporter was found beside nsys",)
    if ldd is None:
        ldd = shutil.which("ldd")
    if ldd is None:
        return ()
    try:
        listing = _run([ldd, str(importer)], timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    missing = missing_libraries(listing)
    if not missing:
        return ()
    packages = " ".join(sorted({_DEBIAN_PACKAGES.get(lib, lib) for lib in missing}))
    return (
        f"{importer.name} lacks {', '.join(missing)}: on Debian/Ubuntu `apt-get download "
        f"{packages}`, unpack each with `dpkg -x PKG.deb DIR` and put the folder holding "
        "the .so files on LD_LIBRARY_PATH (or apt-get install them)",
    )


_DEBIAN_PACKAGES = {"libdw.so.1": "libdw1", "libelf.so.1": "libelf1"}


def missing_libraries(ldd_output: str) -> list[str]:
    """The libraries ``ldd`` reports as ``not found``."""
    return re.findall(r"^\s*(\S+)\s*=>\s*not found", ldd_output, flags=re.MULTILINE)


def detect_nsys(nsys: str | None = None) -> NsysInfo | None:
    """Where ``nsys`` is, its version and report-name generation; ``None`` if absent.

    ``nsys`` may name the executable; otherwise ``$NSYS``, the first ``nsys`` on PATH, or
    one inside Nsight Compute or a CUDA toolkit (:data:`SEARCH_PATTERNS`).
    """
    path = find_nsys(nsys)
    if path is None:
        return None
    try:
        version_run = _run([path, "--version"], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if version_run.returncode != 0:
        return None
    match = _VERSION.search(version_run.stdout + version_run.stderr)
    version = match.group(0) if match else "unknown"
    try:
        listing = _run([path, "stats", "--help-reports"], timeout=60)
        text = listing.stdout + listing.stderr
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    generation = generation_from_reports(text)
    if generation is None:
        year = _version_year(version)
        generation = "2023" if year is not None and year >= 2023 else "2022"
    reports = tuple(sorted(set(re.findall(r"^\s*([a-z_0-9]+)(?=[\[\s]|$)", text, re.M))))
    return NsysInfo(
        path=path,
        version=version,
        generation=generation,
        reports=reports,
        importer=importer_problems(path),
    )


def require_nsys(nsys: str | None = None, *, importer: bool = False) -> NsysInfo:
    """:func:`detect_nsys`, or an error in one line that says how to install it.

    With ``importer``, also an error when nsys could not turn a capture into a report
    (:func:`importer_problems`), saying how to fix that.
    """
    info = detect_nsys(nsys)
    if info is None:
        where = f"{nsys!r}" if nsys else "on PATH (nor inside Nsight Compute or CUDA)"
        raise NsysNotFoundError(f"Nsight Systems CLI (nsys) not found {where}; {INSTALL_HINT}")
    if importer and info.importer:
        raise NsysError(
            f"nsys {info.version} at {info.path} cannot import its captures into a report: "
            + "; ".join(info.importer)
        )
    return info


def report_names(generation: str) -> dict[str, str]:
    """Logical report -> the name this generation of ``nsys stats`` knows it by."""
    if generation not in GENERATIONS:
        raise ValueError(f"unknown nsys generation {generation!r}: expected 2022 or 2023")
    index = GENERATIONS.index(generation)
    return {logical: names[index] for logical, names in REPORTS.items()}


def require_gpus(count: int, what: str = "this GPU profile") -> int:
    """Raise :class:`GpuNotFoundError` in one line unless ``count`` GPUs are visible."""
    found, how = count_gpus()
    if found < count:
        raise GpuNotFoundError(
            f"{what} needs {count} CUDA GPU(s), found {found} ({how}); run it on a GPU "
            "host with the 'gpu' extra installed (pip install '.[gpu]')"
        )
    return found


def profile_paths(name: str, root: str | os.PathLike = "results/profiles") -> dict[str, Path]:
    """Where one profile's files go: ``<root>/<name>/<name>.nsys-rep`` and beside it."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"profile name must be a plain file name, got {name!r}")
    folder = Path(root) / name
    return {
        "dir": folder,
        "output": folder / name,  # what ``nsys profile -o`` takes (no extension)
        "report": folder / f"{name}.nsys-rep",
        "sqlite": folder / f"{name}.sqlite",
        "stats_prefix": folder / "stats" / name,
        "tables": folder / "tables",
        "summary": folder / "summary.md",
    }


def profile_command(
    name: str,
    command: Sequence[str],
    *,
    gpu: bool = False,
    root: str | os.PathLike = "results/profiles",
    nsys: str = "nsys",
) -> list[str]:
    """The ``nsys profile`` command line that wraps ``command`` (e.g. a bench run).

    CPU: NVTX ranges and OS runtime calls (the waits); GPU adds CUDA.  CPU sampling and
    context-switch tracing are off in both: the tables use neither, and both cost time.
    Create ``profile_paths(name, root)["dir"]`` first: when the output folder is missing,
    nsys 2022.4 writes the report to /tmp/nsys-report-XXXX.nsys-rep instead and exits 0.
    """
    if isinstance(command, str) or not command:
        raise ValueError("command must be a non-empty list of arguments")
    trace = "cuda,nvtx,osrt" if gpu else "nvtx,osrt"
    output = profile_paths(name, root)["output"]
    return [
        nsys,
        "profile",
        f"--trace={trace}",
        "--sample=none",
        "--cpuctxsw=none",
        "-o",
        str(output),
        "--force-overwrite",
        "true",
        *command,
    ]


def stats_command(
    report: str | os.PathLike, prefix: str | os.PathLike, info: NsysInfo
) -> list[str]:
    """``nsys stats`` writing each report as CSV to ``<prefix>_<report>.csv``."""

    names = list(report_names(info.generation).values())
    index = GENERATIONS.index(info.generation)
    names += [pair[index] for pair in TRACE_REPORTS.values()]
    if info.reports:  # drop what this build does not ship instead of getting "ERROR"
        names = [name for name in names if name in info.reports]
    return [
        info.path,
        "stats",
        "--report",
        ",".join(names),
        "--format",
        "csv",
        "--output",
        str(prefix),
        "--force-export=true",
        "--force-overwrite=true",
        str(report),
    ]


def export_stats(
    report: str | os.PathLike,
    prefix: str | os.PathLike,
    *,
    nsys: str | None = None,
    waits: bool = True,
) -> list[Path]:
    """Run ``nsys stats`` on ``report`` and return the CSV files it wrote.

    Files are ``<prefix>_<report name>.csv`` (0 bytes for a report without data).  With
    ``waits`` the per-range wait report :mod:`ring.nsys.waits` computes from the exported
    SQLite file is added as ``<prefix>_ring_waits.csv``.
    """
    from .waits import write_range_waits

    report = Path(report)
    if not report.is_file():
        raise FileNotFoundError(f"no Nsight Systems report at {report}")
    info = require_nsys(nsys)
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    argv = stats_command(report, prefix, info)
    done = _run(argv, timeout=1800)
    output = done.stdout + done.stderr
    errors = [line.strip() for line in output.splitlines() if line.lstrip().startswith("ERROR")]
    if done.returncode != 0 or errors:
        detail = "; ".join(errors) or output.strip()[-500:]
        raise NsysError(f"{' '.join(argv)} failed (exit {done.returncode}): {detail}")
    written = []
    for name in argv[argv.index("--report") + 1].split(","):
        path = Path(f"{prefix}_{name}.csv")
        if path.is_file():
            written.append(path)
    if waits:
        sqlite = report.with_suffix(".sqlite")
        if sqlite.is_file():
            written.append(write_range_waits(sqlite, Path(f"{prefix}_ring_waits.csv")))
    return written
