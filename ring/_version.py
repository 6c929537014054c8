"""The library's version, which the package and its wisdom files (:mod:`ring.wisdom`) name."""

__version__ = "0.1.0"
