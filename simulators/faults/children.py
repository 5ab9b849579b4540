"""Child processes of a harness die with it."""

from __future__ import annotations

import ctypes
import signal

_PRCTL = getattr(ctypes.CDLL(None), "prctl", None)   # resolved here: the child only calls it
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """subprocess's preexec_fn (between fork and exec): SIGTERM the child
    when the process that started it dies, so a harness that crashes leaves
    no service behind to connect, under its client id, to a later run's
    broker on a reused port (Linux; elsewhere nothing)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)
