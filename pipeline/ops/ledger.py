"""Read the partition ledgers (``preagg_offsets``): exact per-partition progress of a group.

Each flush adds its figures to the ledger documents of its partitions in the same
transaction as its aggregates (:mod:`pipeline.store.offsets`), so these totals are
exactly what MongoDB holds: status, the chaos audit and the demo read them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.families import base_topic, family_of
from pipeline.store.offsets import OFFSETS_COLLECTION


@dataclass
class LedgerTotals:
    """Sums over ledger documents."""

    events: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    docs: int = 0
    flushes: int = 0
    last_flush_at: float = 0.0


async def read_ledger(
    db: AsyncDatabase[dict[str, Any]], group: str, topics: Iterable[str] | None = None, families: bool = False
) -> list[dict[str, Any]]:
    """Ledger documents of ``group`` (optionally only some topics), by topic and partition.

    The ledgers of document families flushed apart (``<topic>@<family>``, pipeline/core/families.py)
    only with ``families``: their events are the same events, counted once more."""
    query: dict[str, Any] = {"group": group}
    if topics is not None:
        query["topic"] = {"$in": list(topics)}
    docs = [d async for d in db[OFFSETS_COLLECTION].find(query)]
    if not families:
        docs = [d for d in docs if family_of(str(d.get("topic", ""))) is None]
    return sorted(docs, key=lambda d: (d["topic"], d["partition"]))


async def counted_to(
    db: AsyncDatabase[dict[str, Any]], group: str, topics: Iterable[str]
) -> dict[tuple[str, int], int]:
    """Where counting has reached on each partition of ``topics``: the lowest ``next`` of its
    ledgers, its kind's and its document families' flushed apart (the site rollups can lag the
    pages)."""
    wanted = set(topics)
    out: dict[tuple[str, int], int] = {}
    for d in await read_ledger(db, group, families=True):
        topic = base_topic(str(d.get("topic", "")))
        if topic in wanted:
            tp, at = (topic, int(d["partition"])), int(d.get("next") or 0)
            out[tp] = min(out.get(tp, at), at)
    return out


def ledger_totals(docs: Iterable[Mapping[str, Any]]) -> LedgerTotals:
    """Events, refusals by reason, documents and flushes summed over ledger documents."""
    t = LedgerTotals()
    for d in docs:
        t.events += d.get("events", 0)
        t.docs += d.get("docs", 0)
        t.flushes += d.get("flushes", 0)
        t.last_flush_at = max(t.last_flush_at, d.get("at", 0.0))
        for reason, n in (d.get("rejected") or {}).items():
            t.rejected[reason] = t.rejected.get(reason, 0) + n
    return t
