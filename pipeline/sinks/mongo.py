"""MongoDB sink: writes a flush's :class:`DocUpdate` list as unordered bulk upserts.

One ``bulk_write`` per collection per flush, one ``UpdateOne`` per document. The
collections are written concurrently; the flush counts as done only when every
write is acknowledged, and only then are the source offsets acked.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING, AsyncMongoClient, UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.aggregate.updates import DocUpdate
from pipeline.schemas import HitsFields


def mongo_client(url: str, **kwargs: Any) -> AsyncMongoClient[dict[str, Any]]:
    """An async client with the project's defaults (UTC-aware dates, short server selection)."""
    kwargs.setdefault("tz_aware", False)
    kwargs.setdefault("serverSelectionTimeoutMS", 10_000)
    kwargs.setdefault("appname", "preagg")
    return AsyncMongoClient(url, **kwargs)


async def ensure_hits_indexes(db: AsyncDatabase[dict[str, Any]], fields: HitsFields) -> None:
    """Compound (site, page, date) index on both hits collections, as the seed prescribes."""
    for f in (fields.daily, fields.monthly):
        await db[f.collection].create_index(
            [
                (f"{f.metadata}.{f.site}", ASCENDING),
                (f"{f.metadata}.{f.page}", ASCENDING),
                (f"{f.metadata}.{f.date}", ASCENDING),
            ],
            name="site_page_date",
        )


def to_operation(u: DocUpdate) -> UpdateOne:
    """The upsert for one planned document update."""
    update: dict[str, Any] = {"$inc": u.inc}
    if u.set_on_insert:
        update["$setOnInsert"] = u.set_on_insert
    if u.set:
        update["$set"] = u.set
    return UpdateOne({"_id": u.id}, update, upsert=True)


class MongoSink:
    """Applies planned updates to one database."""

    def __init__(self, db: AsyncDatabase[dict[str, Any]]) -> None:
        self.db = db

    async def write(self, updates: Sequence[DocUpdate]) -> int:
        """Write all updates; return the number of documents touched."""
        by_collection: dict[str, list[UpdateOne]] = defaultdict(list)
        for u in updates:
            by_collection[u.collection].append(to_operation(u))
        await asyncio.gather(
            *(self.db[name].bulk_write(ops, ordered=False) for name, ops in by_collection.items())
        )
        return len(updates)
