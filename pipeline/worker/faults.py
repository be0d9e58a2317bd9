"""Fault injection for the chaos tests: die like ``kill -9`` at a named point of a flush.

``PREAGG_FAULT=after-commit:2`` ends the worker with status 137, without any
cleanup, the second time a flush reaches ``after-commit`` (MongoDB committed, Kafka
not yet). ``mid-commit`` dies inside the transaction, after the aggregates were
written and before the offsets and the commit (the server keeps the transaction
open until its lifetime ends); ``before-commit`` before it starts;
``replay-sent`` ends ``preagg deadletters replay`` after one topic's sends were
delivered and before its progress is recorded. Random ``kill -9``
rarely lands in such narrow windows; this hits them every time. Empty in production.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

POINTS = ("before-commit", "mid-commit", "after-commit", "replay-sent")

log = logging.getLogger("preagg.fault")


def parse_fault(spec: str) -> tuple[str, int] | None:
    """``"POINT:N"`` → ``(POINT, N)``; empty → ``None``; anything else is an error."""
    if not spec:
        return None
    point, _, n = spec.partition(":")
    if point not in POINTS or not n.isdigit() or int(n) < 1:
        raise ValueError(f"bad fault spec {spec!r}: want POINT:N with POINT in {POINTS}")
    return point, int(n)


def fault_hook(spec: str) -> Callable[[str], None] | None:
    """A flusher hook that kills the process at the configured point, or ``None``."""
    parsed = parse_fault(spec)
    if parsed is None:
        return None
    target, when = parsed
    seen = 0

    def hit(point: str) -> None:
        nonlocal seen
        if point != target:
            return
        seen += 1
        if seen == when:
            log.error("fault injection: dying at %s #%d", point, seen)
            logging.shutdown()
            os._exit(137)

    return hit
