"""One progress line a minute, instead of one line per flush (quiet by default).

A worker flushing every second wrote a line a second into the operator's terminal. It now
writes, at most once a minute and only when something happened, what it counted since the
last line: events per stream, their rate, refusals, flushes and documents written. The
line per flush stays available (``PREAGG_LOG_FLUSHES``, or ``--loglevel debug``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

log = logging.getLogger("preagg.worker")

#: Seconds between two progress lines (at most; none when nothing happened).
EVERY = 60.0


@dataclass(frozen=True)
class Tally:
    """Running totals of one stream's flusher."""

    events: int = 0
    rejected: int = 0
    flushes: int = 0
    docs: int = 0


def progress_line(before: Mapping[str, Tally], now: Mapping[str, Tally], seconds: float) -> str | None:
    """What happened between two tallies (``None``: nothing did) (pure)."""
    diff = {
        stream: Tally(
            t.events - before.get(stream, Tally()).events,
            t.rejected - before.get(stream, Tally()).rejected,
            t.flushes - before.get(stream, Tally()).flushes,
            t.docs - before.get(stream, Tally()).docs,
        )
        for stream, t in now.items()
    }
    events = sum(d.events for d in diff.values())
    rejected = sum(d.rejected for d in diff.values())
    flushes = sum(d.flushes for d in diff.values())
    if not (events or rejected or flushes):
        return None
    per_stream = ", ".join(f"{s} {d.events:,}" for s, d in diff.items() if d.events)
    rate = events / seconds if seconds > 0 else 0.0
    return (
        f"progress: {events:,} events counted in the last {seconds:.0f} s ({rate:,.0f}/s"
        + (f": {per_stream}" if per_stream else "")
        + f"), {rejected:,} dead-lettered, {flushes:,} flushes, "
        f"{sum(d.docs for d in diff.values()):,} documents written"
    )


async def report_progress(tallies: Callable[[], dict[str, Tally]], every: float = EVERY) -> None:
    """Log :func:`progress_line` every ``every`` seconds, for ever (a worker task)."""
    before, since = tallies(), time.monotonic()
    while True:
        await asyncio.sleep(every)
        now, at = tallies(), time.monotonic()
        line = progress_line(before, now, at - since)
        if line:
            log.info("%s", line)
        before, since = now, at
