"""``python -m ring.report``: the report's command line (:mod:`ring.report.cli`), started as
the ``ring-report`` script starts it, so that an install without the report extra gets one
line naming it instead of a traceback."""

from .._scripts import report

if __name__ == "__main__":
    report()
