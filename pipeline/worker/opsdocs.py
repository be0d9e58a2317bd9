"""Operational counters written with each flush: per-worker progress and dead letters by reason.

They ride in the flush's own bulk write (one extra small upsert per collection), so
``preagg status`` can report them for the whole group without a side channel.
"""

from __future__ import annotations

import time

from pipeline.aggregate.updates import DocUpdate

OPS_COLLECTION = "preagg_ops"
DEADLETTER_DOC = "deadletters"


def ops_updates(
    worker: str, stream: str, events: int, rejected: dict[str, int], docs: int
) -> list[DocUpdate]:
    """Upserts that add one flush's figures to the ops documents."""
    w = DocUpdate(OPS_COLLECTION, f"worker/{worker}", {"kind": "worker"})
    w.add(f"{stream}.events", events)
    w.add(f"{stream}.rejected", sum(rejected.values()))
    w.add(f"{stream}.docs", docs)
    w.add(f"{stream}.flushes", 1)
    w.set["last_flush"] = time.time()
    out = [w]
    if rejected:
        d = DocUpdate(OPS_COLLECTION, DEADLETTER_DOC, {"kind": "deadletters"})
        for reason, n in rejected.items():
            d.add(f"{stream}.{reason}", n)
        out.append(d)
    return out
