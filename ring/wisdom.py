"""``python -m ring.wisdom show | export FILE | import FILE | forget``: the wisdom file of
``algorithm="auto"``'s plans from the command line (:mod:`ring.planning.cli`; the store is
:mod:`ring.planning.store`, the trial race :mod:`ring.planning.race`)."""

from __future__ import annotations

import sys

from .planning.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
