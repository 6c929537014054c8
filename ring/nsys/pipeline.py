"""One profile end to end: ``nsys profile`` -> ``nsys stats`` -> tables -> summary."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from .summary import write_summary
from .tables import write_tables
from .tool import (
    NsysError,
    export_stats,
    profile_command,
    profile_paths,
    require_gpus,
    require_nsys,
)

__all__ = ["run_profile"]


def run_profile(
    name: str,
    command: Sequence[str],
    *,
    gpus: int = 0,
    root: str | os.PathLike = "results/profiles",
    nsys: str | None = None,
    stdout=None,
) -> dict[str, Path]:
    """Profile ``command`` as ``<root>/<name>`` and derive its tables and summary.

    ``gpus`` > 0 traces CUDA too and first checks that that many GPUs are visible.
    Nothing is run or written unless ``nsys`` (and the GPUs) are there.
    """
    info = require_nsys(nsys, importer=True)
    if gpus:
        require_gpus(gpus, f"profile {name!r}")
    paths = profile_paths(name, root)
    argv = profile_command(name, command, gpu=bool(gpus), root=root, nsys=info.path)
    paths["dir"].mkdir(parents=True, exist_ok=True)
    # nsys prints progress to the terminal; stdout (a file, or None to inherit) takes it.
    done = subprocess.run(
        argv, stdout=stdout, stderr=subprocess.STDOUT if stdout else None, check=False
    )
    if done.returncode != 0 or not paths["report"].is_file():
        raise NsysError(
            f"{' '.join(argv)} exited {done.returncode}"
            + ("" if paths["report"].is_file() else f" and wrote no {paths['report']}")
        )
    csvs = export_stats(paths["report"], paths["stats_prefix"], nsys=info.path)
    write_tables(csvs, paths["tables"])
    write_summary(paths["tables"], paths["summary"], title=f"Nsight Systems profile {name}")
    return paths
