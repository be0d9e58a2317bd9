"""A worker's calls that must eventually go through: retried with backoff, each failure logged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("preagg.worker")


async def retried(
    op: Callable[[], Awaitable[object]],
    what: str,
    errors: type[Exception] | tuple[type[Exception], ...],
    attempts: int | None = None,
) -> bool:
    """Run ``op`` until it succeeds (``True``), each failure logged and backed off (1 s doubling to
    30 s); after ``attempts`` failures (``None``: never) give up (``False``)."""
    delay, failed = 1.0, 0
    while True:
        try:
            await op()
            return True
        except errors as exc:
            failed += 1
            if attempts is not None and failed >= attempts:
                log.warning("%s (%s: %s); giving up", what, type(exc).__name__, str(exc)[:200])
                return False
            log.warning("%s (%s: %s); retrying in %.0fs", what, type(exc).__name__, str(exc)[:200], delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
