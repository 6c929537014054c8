"""The library's version, which the package and its wisdom files name
(:mod:`ring.planning.store`)."""

__version__ = "0.1.0"
