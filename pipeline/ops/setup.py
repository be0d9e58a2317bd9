"""``preagg setup``: everything a deployment needs before its first worker, created once, idempotently.

Kafka: the kinds' input topics and the dead-letter topic (partitions, replication
factor and ``min.insync.replicas`` from the settings). MongoDB: the field-name mode
of the database, every collection the kinds, the ledger and the name store write
(never created implicitly inside a transaction), their indexes, the views analysts
read (docs/analysts.md), and on a sharded
cluster each collection's shard key. Running it again changes nothing.

Workers and producers check at start and refuse to run with one line naming what is
missing, unless ``PREAGG_AUTO_SETUP`` (the embedded default) lets them run it themselves.
"""

from __future__ import annotations

from typing import Any

from pymongo import AsyncMongoClient

from pipeline.core.errors import InputError
from pipeline.core.fields import FieldMode, Index, ShardKey, View, check_mode, hashed_id
from pipeline.kafka.admin import TopicSpec, ensure_topics, missing_topics
from pipeline.kafka.options import KafkaConnection
from pipeline.kinds import load_kinds, stream_topics, written_topics
from pipeline.settings import Settings
from pipeline.store.client import primary
from pipeline.store.meta import (
    META_COLLECTION,
    claim_schema_mode,
    ensure_collections,
    ensure_indexes,
    ensure_views,
    is_sharded_cluster,
    shard_collections,
)
from pipeline.store.names.store import names_fields, names_indexes
from pipeline.store.offsets import OFFSETS_COLLECTION


class NotSetUp(InputError):
    """What is missing, in one line for the operator."""


def collections(settings: Settings) -> list[str]:
    """Every collection a worker of these settings writes."""
    mode = check_mode(settings.schema)
    out = [c for kind in load_kinds(settings.kinds) for c in kind.collections()]
    return [*out, names_fields(mode)["collection"], OFFSETS_COLLECTION, META_COLLECTION]


def indexes(settings: Settings, mode: FieldMode) -> list[Index]:
    """Every secondary index of those collections."""
    return [*(ix for kind in load_kinds(settings.kinds) for ix in kind.indexes(mode)), *names_indexes(mode)]


def views(settings: Settings, mode: FieldMode) -> list[View]:
    """Every view analysts query (docs/analysts.md)."""
    return [v for kind in load_kinds(settings.kinds) for v in kind.views(mode)]


def shard_keys(settings: Settings, mode: FieldMode) -> list[ShardKey]:
    """Shard key per collection. The name store is small: hashed ``_id`` spreads it.

    The ledger (``preagg_offsets``) is not sharded: it stays whole on the database's
    primary shard, so a flush's ledger writes add one shard to its transaction, not
    one per partition it covers (a hashed ``_id`` spread one worker's ledgers over
    every shard, making nearly every flush a multi-shard transaction).
    """
    keys = [k for kind in load_kinds(settings.kinds) for k in kind.shard_keys(mode)]
    return [*keys, hashed_id(names_fields(mode)["collection"])]


async def setup_kafka(settings: Settings) -> list[str]:
    """Create missing topics; lines saying what was created."""
    conn = KafkaConnection.of(settings)
    created = await ensure_topics(
        conn, [*stream_topics(settings), *written_topics(settings)], TopicSpec.of(settings)
    )
    created += await ensure_topics(conn, [settings.deadletter_topic], TopicSpec.of(settings, partitions=1))
    return [f"kafka: created topic {t}" for t in created]


async def setup_mongo(settings: Settings, client: AsyncMongoClient[dict[str, Any]]) -> list[str]:
    """Claim the field-name mode, create missing collections and indexes, shard, let the kinds
    derive what they need from stored documents; lines saying what changed."""
    mode = check_mode(settings.schema)
    db = primary(client, settings.db)
    stored = await claim_schema_mode(db, mode)
    if stored != mode:
        raise NotSetUp(
            f"database {settings.db!r} holds {stored} field names but PREAGG_SCHEMA is {mode}: "
            "one database, one schema mode"
        )
    lines = [f"mongodb: created collection {c}" for c in await ensure_collections(db, collections(settings))]
    before = {(c, ix["name"]) for c in collections(settings) async for ix in await db[c].list_indexes()}
    wanted = indexes(settings, mode)
    await ensure_indexes(db, wanted)
    lines += [
        f"mongodb: created index {ix.collection}.{ix.name}"
        for ix in wanted
        if (ix.collection, ix.name) not in before
    ]
    lines += await ensure_views(db, views(settings, mode))
    if await is_sharded_cluster(client):
        sharded = await shard_collections(client, settings.db, shard_keys(settings, mode))
        lines += [f"mongodb: sharded {ns}" for ns in sharded]
    for kind in load_kinds(settings.kinds):  # after sharding: what they write goes to its shard
        lines += await kind.prepare(db, mode)
    return lines


async def setup(settings: Settings, client: AsyncMongoClient[dict[str, Any]]) -> list[str]:
    """Both sides; an empty list means everything was there already."""
    return [*await setup_kafka(settings), *await setup_mongo(settings, client)]


async def missing(settings: Settings, client: AsyncMongoClient[dict[str, Any]]) -> list[str]:
    """What a worker of these settings needs and does not find (topics, collections)."""
    wanted = [*stream_topics(settings), *written_topics(settings), settings.deadletter_topic]
    topics = await missing_topics(KafkaConnection.of(settings), wanted)
    db = primary(client, settings.db)
    existing = set(await db.list_collection_names())
    colls = [c for c in collections(settings) if c not in existing]
    mode = check_mode(settings.schema)
    derived = [x for kind in load_kinds(settings.kinds) for x in await kind.unprepared(db, mode)]
    return [*(f"topic {t}" for t in topics), *(f"collection {settings.db}.{c}" for c in colls), *derived]


async def ready_or_setup(settings: Settings, client: AsyncMongoClient[dict[str, Any]]) -> list[str]:
    """Run setup (auto setup) or check; raises :class:`NotSetUp` naming what is missing."""
    if settings.auto_setup:
        return await setup(settings, client)
    absent = await missing(settings, client)
    if absent:
        raise NotSetUp(f"not set up: {', '.join(absent)} missing; run `preagg setup` with these settings")
    return []


async def worker_setup(
    settings: Settings, client: AsyncMongoClient[dict[str, Any]]
) -> tuple[list[str], str | None]:
    """:func:`ready_or_setup` as a worker takes it: what is missing is a refusal (a value)."""
    try:
        return await ready_or_setup(settings, client), None
    except NotSetUp as exc:
        return [], str(exc)
