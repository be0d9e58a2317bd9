"""``preagg retention run``: the few ``update_many`` statements that prune past the tiers.

Each statement unsets one counter field (``minute`` or ``hourly``) of the daily
documents older than a tier, on the (site, date) index. It is safe while workers
write: the run records its cutoffs first and waits until every worker has read them
(:data:`pipeline.kinds.hits.sites.tiers.REFRESH_SECONDS`, twice); from then on no
worker writes a counter of a tier into a day up to its cutoff
(:meth:`pipeline.kinds.hits.sites.tiers.Pruned.keeps`), so a pruned field is not
recreated, and an update of one document is atomic. Outside a transaction on purpose:
a run may touch millions of documents; a run cut short is finished by the next.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import date
from typing import Any

import pymongo
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.kinds.hits.layout import HitsFields
from pipeline.kinds.hits.sites.cache import retention_of
from pipeline.kinds.hits.sites.store import load, save_pruned
from pipeline.kinds.hits.sites.tiers import SETTLE_SECONDS, Tiers, cutoffs, prunes

#: Seconds one statement may take (a first run over years of documents is long).
STATEMENT_TIMEOUT = 1800.0


@dataclass(frozen=True)
class PruneResult:
    """One statement's outcome: what it prunes and how many documents it changed (or would)."""

    what: str
    documents: int


async def run_retention(
    db: AsyncDatabase[dict[str, Any]],
    fields: HitsFields,
    default: Tiers,
    today: date,
    dry_run: bool = False,
    settle: float = SETTLE_SECONDS,
    statement_timeout: float = STATEMENT_TIMEOUT,
    spare_recent: bool = False,
) -> list[PruneResult]:
    """Prune (or with ``dry_run`` count) the daily documents' counters past their tiers.

    Each statement has its own deadline (``statement_timeout``, instead of the client's
    short one): a first run on a large collection is long, and one past its deadline
    ends with a timeout error, its documents so far pruned, the rest left to the next run.

    ``spare_recent`` (the workers' periodic runs): documents written within their tier
    are not pruned, and no cutoff is recorded: workers go on writing every counter
    into old days (a backfill). An operator's run prunes by date and records cutoffs,
    past which workers write no counter of the tier (docs/calendar.md).
    """
    retention = retention_of(default, (await load(db)).values())
    statements = prunes(fields.daily, retention, today, spare_recent)
    if statements and not dry_run and not spare_recent:
        await save_pruned(db, cutoffs(retention, today))
        await asyncio.sleep(settle)
    out = []
    # Pages' daily documents, then the sites' daily rollups: the same names, the same tiers.
    for name in (fields.daily.collection, fields.rollups.daily.collection):
        coll = db[name]
        for p in statements:
            with pymongo.timeout(statement_timeout):
                if dry_run:
                    n = await coll.count_documents(p.filter)
                else:
                    n = (await coll.update_many(p.filter, {"$unset": {p.field: ""}})).modified_count
            what = p.what if name == fields.daily.collection else f"{p.what} (site rollups)"
            out.append(PruneResult(what, n))
    return out
