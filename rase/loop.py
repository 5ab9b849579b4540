"""Small helpers for the services' asyncio loops."""

from __future__ import annotations

import asyncio


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`, waking early when `stop` is set; True if stopping."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    return stop.is_set()
