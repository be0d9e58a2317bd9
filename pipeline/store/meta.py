"""What a worker checks and prepares in the database before its first flush.

Transactions (exactly-once needs them), the field-name mode the database is
written in (one per database), and the indexes the kinds declare.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pymongo import AsyncMongoClient, ReturnDocument
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import CollectionInvalid, DuplicateKeyError, OperationFailure

from pipeline.core.fields import FieldMode, Index, ShardKey, View
from pipeline.store.offsets import OFFSETS_COLLECTION

META_COLLECTION = "preagg_meta"


async def claim_schema_mode(db: AsyncDatabase[dict[str, Any]], mode: FieldMode) -> str:
    """The schema mode the database is written in: ``mode`` if it was unclaimed (atomic)."""
    doc: dict[str, Any] | None
    try:
        doc = await db[META_COLLECTION].find_one_and_update(
            {"_id": "schema"},
            {"$setOnInsert": {"mode": mode}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
    except DuplicateKeyError:
        doc = None
    if doc is None:  # a lost upsert race: the winner's document exists now
        doc = await db[META_COLLECTION].find_one({"_id": "schema"})
    return str((doc or {}).get("mode", mode))


async def supports_transactions(client: AsyncMongoClient[dict[str, Any]], db: str) -> bool:
    """True when the server runs multi-document transactions (not a standalone mongod)."""
    try:
        async with client.start_session() as s, await s.start_transaction():
            await client[db][OFFSETS_COLLECTION].find_one({"_id": "probe"}, session=s)
    except OperationFailure as exc:
        if exc.code in (20, 263):  # IllegalOperation: standalone; OperationNotSupportedInTransaction
            return False
        raise
    return True


async def ensure_indexes(db: AsyncDatabase[dict[str, Any]], indexes: Iterable[Index]) -> None:
    """Create the declared indexes (a no-op for those that exist with the same keys)."""
    for ix in indexes:
        await db[ix.collection].create_index(list(ix.keys), name=ix.name)


async def ensure_views(db: AsyncDatabase[dict[str, Any]], views: Iterable[View]) -> list[str]:
    """Create the declared views, replacing one whose source or pipeline changed; lines saying what.

    A view holds no data, so replacing it loses nothing (``collMod`` would too, but not
    every server we run on takes it); a name taken by a collection is refused, never dropped.
    """
    existing = {c["name"]: c async for c in await db.list_collections()}
    lines = []
    for v in views:
        found = existing.get(v.name)
        pipeline = list(v.pipeline)
        if found is not None:
            if found.get("type") != "view":
                raise CollectionInvalid(f"{v.name} is a collection, not a view: rename it or drop it")
            options = found.get("options", {})
            if options.get("viewOn") == v.source and options.get("pipeline") == pipeline:
                continue
            await db.drop_collection(v.name)
        try:
            await db.create_collection(v.name, viewOn=v.source, pipeline=pipeline)
        except CollectionInvalid:  # created meanwhile by another setup
            continue
        lines.append(f"mongodb: {'replaced' if found is not None else 'created'} view {v.name}")
    return lines


async def ensure_collections(db: AsyncDatabase[dict[str, Any]], names: Iterable[str]) -> list[str]:
    """Create the collections that do not exist; returns the ones created.

    A flush must never create one: MongoDB refuses collection creation inside a
    cross-shard transaction, and elsewhere it takes locks a transaction should not wait on.
    """
    existing = set(await db.list_collection_names())
    created = []
    for name in names:
        if name in existing:
            continue
        try:
            await db.create_collection(name)
        except CollectionInvalid:  # created meanwhile by another setup
            continue
        created.append(name)
    return created


async def is_sharded_cluster(client: AsyncMongoClient[dict[str, Any]]) -> bool:
    """True when connected to a mongos (``hello`` answers ``msg: isdbgrid``)."""
    hello = await client.admin.command("hello")
    return bool(hello.get("msg") == "isdbgrid")


async def shard_collections(
    client: AsyncMongoClient[dict[str, Any]], db: str, keys: Iterable[ShardKey]
) -> list[str]:
    """On a sharded cluster, shard each collection on its key (already sharded ones are left)."""
    done = []
    sharded = {d["_id"] async for d in client["config"]["collections"].find({"_id": {"$regex": f"^{db}\\."}})}
    await client.admin.command("enableSharding", db)
    for k in keys:
        ns = f"{db}.{k.collection}"
        if ns in sharded:
            continue
        await client.admin.command("shardCollection", ns, key=dict(k.keys))
        done.append(ns)
    return done
