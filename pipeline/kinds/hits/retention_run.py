"""``preagg retention run``: the few ``update_many`` statements that prune past the tiers.

Each statement unsets one counter field (``minute`` or ``hourly``) of the daily
documents older than a tier, on the (site, date) index. It is safe while workers
write: an update of one document is atomic, workers write no counter of a tier into a
day at its edge (:meth:`pipeline.kinds.hits.retention.Retention.keeps`), and a
pruned field is not recreated. Outside a transaction on purpose: a run may touch
millions of documents; a run cut short is finished by the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.kinds.hits.layout import HitsFields
from pipeline.kinds.hits.retention import Tiers, prunes
from pipeline.kinds.hits.site_config import load, retention_of


@dataclass(frozen=True)
class Pruned:
    """One statement's outcome: what it prunes and how many documents it changed (or would)."""

    what: str
    documents: int


async def run_retention(
    db: AsyncDatabase[dict[str, Any]], fields: HitsFields, default: Tiers, today: date, dry_run: bool = False
) -> list[Pruned]:
    """Prune (or with ``dry_run`` count) the daily documents' counters past their tiers."""
    retention = retention_of(default, (await load(db)).values())
    coll = db[fields.daily.collection]
    out = []
    for p in prunes(fields.daily, retention, today):
        if dry_run:
            n = await coll.count_documents(p.filter)
        else:
            n = (await coll.update_many(p.filter, {"$unset": {p.field: ""}})).modified_count
        out.append(Pruned(p.what, n))
    return out
