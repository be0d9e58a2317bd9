"""Fault injection for the chaos tests: die like ``kill -9`` at a named point of a flush.

``PREAGG_FAULT=after-commit:2`` ends the worker with status 137, without any
cleanup, the second time a flush reaches ``after-commit`` (MongoDB committed, Kafka
not yet). ``mid-commit`` dies inside the transaction, after the aggregates were
written and before the offsets and the commit (the server keeps the transaction
open until its lifetime ends); ``early-commit`` inside the first of a flush's phases of
marked writes when it has several (documents another one points to: a visits flush's counts
and open visits, before the head that names them); ``before-commit`` before it starts;
``replay-sent`` ends ``preagg deadletters replay`` after one topic's sends were
delivered and before its progress is recorded. Random ``kill -9``
rarely lands in such narrow windows; this hits them every time. Empty in production.

``POINT:N:STREAM`` counts only the flushes of streams whose name starts with ``STREAM``
(``mid-commit:2:hits-visits``: the visits stage's second commit), so that a drill can cut
one stage's flush whatever order the others flush in.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextvars import ContextVar

POINTS = ("before-commit", "early-commit", "mid-commit", "after-commit", "replay-sent")

log = logging.getLogger("preagg.fault")

#: The stream whose flush the running task writes (set by the committer for ``POINT:N:STREAM``).
FLUSHING: ContextVar[str] = ContextVar("preagg_flushing", default="")


def parse_fault(spec: str) -> tuple[str, int, str] | None:
    """``"POINT:N[:STREAM]"`` → ``(POINT, N, STREAM)``; empty → ``None``; anything else is an error."""
    if not spec:
        return None
    point, _, rest = spec.partition(":")
    n, _, stream = rest.partition(":")
    if point not in POINTS or not n.isdigit() or int(n) < 1:
        raise ValueError(f"bad fault spec {spec!r}: want POINT:N[:STREAM] with POINT in {POINTS}")
    return point, int(n), stream


def fault_hook(spec: str) -> Callable[[str], None] | None:
    """A flusher hook that kills the process at the configured point, or ``None``."""
    parsed = parse_fault(spec)
    if parsed is None:
        return None
    target, when, stream = parsed
    seen = 0

    def hit(point: str) -> None:
        nonlocal seen
        if point != target or not FLUSHING.get().startswith(stream):
            return
        seen += 1
        if seen == when:
            log.error("fault injection: dying at %s #%d", point, seen)
            logging.shutdown()
            os._exit(137)

    return hit
