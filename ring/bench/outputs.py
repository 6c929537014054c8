"""Where the study's tools write, checked before they do any work.

A sweep, a report or a table build that can only fail at its last step (a folder that
cannot be created, a read-only or full disk, a name that is a directory) should fail at its
first, in one line, having cost nothing.  Each check writes and removes a probe file: the
answer comes from the file system, not from permission bits (which do not bind root).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["directory_problem", "file_problem"]


def directory_problem(folder: str | os.PathLike, flag: str) -> str | None:
    """Why files cannot be written into ``folder`` (named by option ``flag``), or None.

    Nothing is created: the probe goes into the nearest folder that exists, where the
    missing ones would be made."""
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{flag} {str(folder)!r} is under {str(existing)!r}, which is not a folder"
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"cannot write to {flag} {str(folder)!r}: {exc.strerror or exc}"
    return None


def file_problem(path: str | os.PathLike, flag: str) -> str | None:
    """Why ``path`` (named by option ``flag``) cannot be written, or None."""
    path = Path(path)
    if path.is_dir():
        return f"{flag} {str(path)!r} is a directory; name a file"
    problem = directory_problem(path.parent, flag)
    return problem and problem.replace(f"{str(path.parent)!r}", f"{str(path)!r}", 1)
