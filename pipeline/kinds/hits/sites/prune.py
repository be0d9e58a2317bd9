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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import pymongo
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.uniques import overflowed
from pipeline.kinds.hits.layout import HitsFields, register_fields
from pipeline.kinds.hits.registers import register_ids
from pipeline.kinds.hits.sites.cache import retention_of
from pipeline.kinds.hits.sites.store import load, save_pruned
from pipeline.kinds.hits.sites.tiers import SETTLE_SECONDS, Prune, Tiers, cutoffs, prunes
from pipeline.store.reads import chunks

#: Seconds one statement may take (a first run over years of documents is long).
STATEMENT_TIMEOUT = 1800.0
#: Documents per step when a pruned field's sketches have registers to delete with it
#: (SecantusDB's ``$in`` is quadratic in its values).
CHUNK = 500


@dataclass(frozen=True)
class PruneResult:
    """One statement's outcome: what it prunes and how many documents it changed (or would)."""

    what: str
    documents: int
    #: Register documents of the pruned hourly visitor sketches deleted (or that would be).
    registers: int = 0


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
            what = p.what if name == fields.daily.collection else f"{p.what} (site rollups)"
            if p.field == fields.daily.hourly_visitors:
                regs = db[register_fields(fields.mode).collection]
                n, r = await prune_sketches(coll, regs, p, dry_run, statement_timeout)
                out.append(PruneResult(what, n, r))
                continue
            with pymongo.timeout(statement_timeout):
                if dry_run:
                    n = await coll.count_documents(p.filter)
                else:
                    n = (await coll.update_many(p.filter, {"$unset": {p.field: ""}})).modified_count
            out.append(PruneResult(what, n))
    return out


async def prune_sketches(
    coll: AsyncCollection[dict[str, Any]],
    regs: AsyncCollection[dict[str, Any]],
    p: Prune,
    dry_run: bool,
    statement_timeout: float,
) -> tuple[int, int]:
    """Prune one statement's hourly visitor sketches with their register documents (documents
    changed, registers deleted), :data:`CHUNK` documents at a time.

    A busy hour's registers live in a document of their own (docs/visitors.md): unsetting the
    hour's field alone left them behind for good. Each chunk's field is unset first, then the
    registers of the documents that no longer hold it are deleted: a document a worker wrote
    meanwhile (a backfill the workers' periodic run spares) keeps both. A run cut short
    between the two leaves those registers unread (no query reads a pruned hour's registers).
    """
    if dry_run:
        docs, ids = 0, []
        with pymongo.timeout(statement_timeout):
            async for d in coll.find(p.filter, {p.field: 1}):
                docs += 1
                ids += _registers(coll.name, p.field, d)
            existing = [await regs.count_documents({"_id": {"$in": c}}) for c in chunks(ids, CHUNK)]
        return docs, sum(existing)
    docs = registers = 0
    while True:
        with pymongo.timeout(statement_timeout):
            chunk = [d async for d in coll.find(p.filter, {p.field: 1}).limit(CHUNK)]
            if not chunk:
                break
            ids = [d["_id"] for d in chunk]
            done = await coll.update_many({**p.filter, "_id": {"$in": ids}}, {"$unset": {p.field: ""}})
            docs += done.modified_count
            held = {d["_id"]: _registers(coll.name, p.field, d) for d in chunk}
            with_registers = [i for i, r in held.items() if r]
            if with_registers:
                kept = {
                    d["_id"]
                    async for d in coll.find(
                        {"_id": {"$in": with_registers}, p.field: {"$exists": True}}, {"_id": 1}
                    )
                }
                gone = [r for i in with_registers if i not in kept for r in held[i]]
                if gone:
                    registers += (await regs.delete_many({"_id": {"$in": gone}})).deleted_count
        if not done.modified_count:
            break  # nothing of this chunk matched any more: written meanwhile, left as it is
    return docs, registers


def _registers(collection: str, field: str, doc: Mapping[str, Any]) -> list[str]:
    """``_id`` of the register documents of ``doc``'s overflowed hourly sketches."""
    hours = doc.get(field)
    if not isinstance(hours, Mapping):
        return []
    return [
        r
        for hour, holder in hours.items()
        if isinstance(holder, Mapping) and overflowed(holder)
        for r in register_ids(collection, doc["_id"], f"{field}.{hour}", holder)
    ]
