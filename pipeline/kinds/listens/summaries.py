"""``preagg setup`` for listens: top-tags summaries of the users written before them.

Workers keep every user's summary (``listen_tops``) in step with its (user, tag)
documents, in the same transaction; documents written by an older preagg have none.
Setup builds the missing ones from the slots, then records that it did: a worker
refuses to start while that record is absent (:meth:`Listens.unprepared`), so no
worker writes a partial summary for a user whose older tags it has not seen.
Upgrading across this change: stop the workers, run ``preagg setup``, start them.
"""

from __future__ import annotations

from typing import Any

from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.fields import FieldMode
from pipeline.core.ids import Id
from pipeline.kinds.listens.layout import listen_fields, top_fields, top_id
from pipeline.kinds.listens.tops import entry_of, tag_key, too_big
from pipeline.store.meta import META_COLLECTION

#: The record (in ``preagg_meta``) that every user's summary exists.
MARKER = "listens.tops"
#: Summaries written per statement.
CHUNK = 500


async def built(db: AsyncDatabase[dict[str, Any]]) -> bool:
    """Whether setup has built the summaries of this database."""
    return await db[META_COLLECTION].find_one({"_id": MARKER}, {"_id": 1}) is not None


async def build_missing(db: AsyncDatabase[dict[str, Any]], mode: FieldMode) -> int:
    """Build the summary of every user that has (user, tag) documents and no summary; how many."""
    f, tf = listen_fields(mode), top_fields(mode)
    have = {d["_id"] async for d in db[tf["collection"]].find({}, {"_id": 1})}
    entries: dict[Id, dict[str, bytes]] = {}
    async for doc in db[f["collection"]].find({}, {f["user"]: 1, f["tag"]: 1, f["slots"]: 1}):
        user, tag = doc[f["user"]], doc[f["tag"]]
        if top_id(user) in have:
            continue
        entry = entry_of(tag, (doc.get(f["slots"]) or {}).values(), f)
        got = entries.setdefault(user, {})
        if entry is not None:
            got[tag_key(tag)] = entry
    ops = [
        # $setOnInsert: a summary that exists (an earlier, interrupted setup) is whole already.
        UpdateOne({"_id": top_id(u)}, {"$setOnInsert": whole(u, e, tf)}, upsert=True)
        for u, e in entries.items()
    ]
    for i in range(0, len(ops), CHUNK):
        await db[tf["collection"]].bulk_write(ops[i : i + CHUNK], ordered=False)
    return len(ops)


def whole(user: Id, entries: dict[str, bytes], tf: dict[str, str]) -> dict[str, Any]:
    """A user's summary built at once (given up when too big, as a worker does)."""
    if too_big(entries):
        return {tf["user"]: user, tf["full"]: True, tf["tags"]: {}}
    return {tf["user"]: user, tf["tags"]: entries}


async def prepare(db: AsyncDatabase[dict[str, Any]], mode: FieldMode) -> list[str]:
    """Build the missing summaries once, then record it."""
    if await built(db):
        return []
    n = await build_missing(db, mode)
    await db[META_COLLECTION].update_one({"_id": MARKER}, {"$set": {"users": n}}, upsert=True)
    where = top_fields(mode)["collection"]
    return [f"mongodb: built the top-tags summaries of {n} users ({where})"] if n else []
