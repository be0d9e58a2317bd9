"""``preagg status``: lag, throughput and dead letters of the whole worker group."""

from __future__ import annotations

import time
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.ops.lag import group_lag
from pipeline.settings import Settings
from pipeline.worker.opsdocs import DEADLETTER_DOC, OPS_COLLECTION


async def group_status(settings: Settings, db: AsyncDatabase[dict[str, Any]]) -> dict[str, Any]:
    """Lag per partition, per-worker totals, dead letters by reason, as one dict."""
    lags = await group_lag(settings, [settings.hits_topic])
    dead_end = sum(p.end for p in await group_lag(settings, [settings.deadletter_topic]))
    workers = [d async for d in db[OPS_COLLECTION].find({"kind": "worker"})]
    dead = await db[OPS_COLLECTION].find_one({"_id": DEADLETTER_DOC}) or {}
    return {
        "partitions": [
            {"topic": p.topic, "partition": p.partition, "end": p.end, "committed": p.committed, "lag": p.lag}
            for p in lags
        ],
        "lag": sum(p.lag for p in lags),
        "workers": [
            {
                "worker": w["_id"].removeprefix("worker/"),
                **{k: v for k, v in w.items() if k not in ("_id", "kind")},
            }
            for w in workers
        ],
        "deadletters": {k: v for k, v in dead.items() if k not in ("_id", "kind")},
        "deadletter_topic_messages": dead_end,
    }


def status_text(st: dict[str, Any]) -> str:
    """Human rendering of :func:`group_status`."""
    out = [f"lag: {st['lag']} messages"]
    for p in st["partitions"]:
        out.append(
            f"  {p['topic']}[{p['partition']}] end={p['end']} committed={p['committed']} lag={p['lag']}"
        )
    out.append(f"workers ({len(st['workers'])} seen):")
    now = time.time()
    for w in st["workers"]:
        h = w.get("hits", {})
        age = now - w.get("last_flush", 0)
        out.append(
            f"  {w['worker']}: events={h.get('events', 0)} rejected={h.get('rejected', 0)} "
            f"docs={h.get('docs', 0)} flushes={h.get('flushes', 0)} last flush {age:.0f}s ago"
        )
    dl = st["deadletters"]
    total = sum(sum(v.values()) for v in dl.values() if isinstance(v, dict))
    out.append(f"dead letters: {total} counted, {st['deadletter_topic_messages']} on the topic")
    for stream, reasons in dl.items():
        if isinstance(reasons, dict):
            for reason, n in sorted(reasons.items()):
                out.append(f"  {stream}/{reason}: {n}")
    return "\n".join(out)
