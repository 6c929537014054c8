"""What the Ctrl-C tests need of the process that runs them."""

from __future__ import annotations

import signal


def let_children_see_sigint() -> None:
    """A test run started in the background (nohup, or ``&`` in a shell without job control)
    inherits SIGINT ignored, and an ignored disposition passes on to every child it starts:
    the Ctrl-C tests' children would then never see the SIGINT they are sent and loop for
    ever.  With Python's own handler installed here, children start with the default."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
