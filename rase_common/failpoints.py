"""Crash points for the crash-safety tests (tests only).

A service calls crash_point("name") right after a durable step. When the
environment variable RASE_CRASH_AT names that point, the process SIGKILLs
itself there: a real kill, at a step a test could not hit reliably from the
outside. Unset (always, outside tests) it does nothing.
"""

from __future__ import annotations

import os
import signal

ENV = "RASE_CRASH_AT"


def crash_point(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
