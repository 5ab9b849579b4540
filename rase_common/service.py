"""The one shape of a RASE service (agent, fog, fusion center).

A service is a class whose constructor only stores its config and
collaborators (no I/O), and whose `run()`:

1. opens what it needs (`open(stack)`: databases, broker links, the metrics
   server), registering every close on an AsyncExitStack, so whatever was
   opened is closed however the run ends;
2. runs its owned tasks (`tasks()`) until one of them ends: a task that
   returns ends the service normally, one that raises ends it with that
   error (never silently), and cancellation (SIGTERM, SIGINT, or the
   `stop` event) ends every task;
3. closes in reverse order.

`run_service()` is the one place that turns SIGTERM and SIGINT into a clean
stop, for the CLI and for `docker stop` (the image runs `rase` as PID 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Coroutine
from typing import Any

from rase_common.errors import ConfigError

log = logging.getLogger(__name__)
STOP_GRACE_S = 2.0      # after a stop, how long a task may take to end before it is cancelled again


class Service:
    """Base class; subclasses set `name` and implement open() and tasks()."""

    name = "service"

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        """Acquire resources; register their release on `stack`."""

    def tasks(self) -> list[Coroutine[Any, Any, None]]:
        """The service's long-running coroutines."""
        raise NotImplementedError

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Run until a task ends, `stop` is set, or the caller cancels."""
        async with contextlib.AsyncExitStack() as stack:
            await self.open(stack)
            coros: list[Coroutine[Any, Any, Any]] = list(self.tasks())
            if stop is not None:
                coros.append(stop.wait())
            await run_owned(coros, self.name)


async def run_owned(coros: list[Coroutine[Any, Any, Any]], owner: str = "service") -> None:
    """Run coroutines as tasks owned by the caller: when the first ends, the
    others are cancelled and awaited; the first error (if any) is raised."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                err = task.exception()
                assert err is not None
                log.error("%s: task %s failed: %r", owner, _task_name(task), err)
                raise err
    finally:
        for task in tasks:
            task.cancel()
        pending = set(tasks)
        while pending:
            # A task that ate its cancellation (a bug) is named and cancelled again, not waited on forever.
            _, pending = await asyncio.wait(pending, timeout=STOP_GRACE_S)
            for task in pending:
                log.warning("%s: task %s still running %g s after it was cancelled; cancelling it again",
                            owner, _task_name(task), STOP_GRACE_S)
                task.cancel()
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                log.debug("%s: task %s ended with %r while stopping", owner, _task_name(task), task.exception())


def _task_name(task: asyncio.Future) -> str:
    coro = getattr(task, "get_coro", lambda: None)()
    return getattr(coro, "__qualname__", repr(task))


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run_service(service: Service, stop: asyncio.Event | None = None) -> int:
    """Run a service in a fresh event loop until it ends or SIGTERM/SIGINT
    arrives; then let it close cleanly. Returns the process exit code: 0
    after a signal or a normal end, 2 when it cannot start (a ConfigError:
    one line naming what), 1 after any other failure."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        stopping = stop or asyncio.Event()
        installed = []
        for sig in STOP_SIGNALS:
            try:
                loop.add_signal_handler(sig, _on_signal, sig, stopping)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass     # not the main thread, or a platform without signals: the caller stops us
        try:
            await service.run(stopping)
            return 0
        except ConfigError as err:
            log.error("%s cannot start: %s", getattr(service, "name", "service"), err)
            return 2
        except Exception as err:  # noqa: BLE001 - reported once, as the exit status
            log.exception("%s stopped by an error: %s", getattr(service, "name", "service"), err)
            return 1
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    return asyncio.run(main())


def _on_signal(sig: signal.Signals, stopping: asyncio.Event) -> None:
    log.info("%s received: stopping", signal.Signals(sig).name)
    stopping.set()
