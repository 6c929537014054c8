"""Optional dependencies, imported where they are used."""

from __future__ import annotations

import importlib

EXTRAS = {"cupy": "gpu", "mpi4py": "mpi", "nvtx": "nvtx"}


class MissingDependencyError(ImportError):
    """An optional package that this feature needs is not installed."""


def require(module: str, feature: str):
    """Import ``module`` or raise an error that says what is missing and how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = EXTRAS.get(top)
        hint = f"pip install '.[{extra}]'" if extra else f"pip install {top}"
        raise MissingDependencyError(
            f"{feature} needs the Python package {top!r}, which is not installed "
            f"({exc}); install it with: {hint}"
        ) from exc
