"""The MongoDB client every preagg process uses, with a deadline on every call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pymongo
from pymongo import AsyncMongoClient, ReadPreference, WriteConcern
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.read_concern import ReadConcern

#: The database handle every store function takes.
Db = AsyncDatabase[dict[str, Any]]


def primary(
    client: AsyncMongoClient[dict[str, Any]], db: str, majority: bool = False, read_majority: bool = False
) -> AsyncDatabase[dict[str, Any]]:
    """``db`` read from the primary whatever the URL's ``readPreference`` says.

    Workers and operator commands read ledgers, the name store and documents they are
    about to write: a secondary's lagging copy would be wrong, and PyMongo refuses a
    transaction with a non-primary read preference. Analysts' queries keep the URL's.

    ``majority``: writes acknowledged by a majority of the replica set, whatever the URL's
    ``w`` says. A flush's idempotent writes and the ledger moves after them must both survive
    a failover: with ``w:1`` a new primary can roll back the documents' writes while the
    ledger's move (acknowledged later, after replication) survives, and the range is lost
    (MongoDB's manual, "Rollbacks During Replica Set Failover"; "Write Concern": majority).

    ``read_majority``: reads see only what a majority acknowledged ("Read Concern "majority"",
    MongoDB's manual), for reads that decide whether a write already happened.
    """
    if read_majority:
        return client.get_database(
            db,
            read_preference=ReadPreference.PRIMARY,
            write_concern=WriteConcern("majority"),
            read_concern=ReadConcern("majority"),
        )
    if majority:
        return client.get_database(
            db, read_preference=ReadPreference.PRIMARY, write_concern=WriteConcern("majority")
        )
    return client.get_database(db, read_preference=ReadPreference.PRIMARY)


def mongo_client(url: str, timeout: float | None = 20.0, **kwargs: Any) -> AsyncMongoClient[dict[str, Any]]:
    """An async client with the project's defaults: short server selection and a deadline on every call.

    Dates come back naive (``tz_aware=False``), holding UTC: BSON dates are UTC and the
    query layer compares them with naive UTC datetimes.

    ``timeout`` (seconds) becomes the client's ``timeoutMS`` (PyMongo's client-side
    operation timeout): each call, cursor included, ends with a timeout error rather
    than hanging on a lost primary. ``None`` or ``0``: no deadline.
    """
    kwargs.setdefault("tz_aware", False)
    kwargs.setdefault("serverSelectionTimeoutMS", 10_000)
    kwargs.setdefault("appname", "preagg")
    if timeout:
        kwargs.setdefault("timeoutMS", int(timeout * 1000))
    return AsyncMongoClient(url, **kwargs)


async def start_transaction(session: AsyncClientSession) -> None:
    """A transaction as every write of ours needs it: snapshot reads, majority writes, the primary.

    Transactions refuse any other read preference, and only ``snapshot`` is consistent
    across shards.
    """
    await session.start_transaction(
        read_concern=ReadConcern("snapshot"),
        write_concern=WriteConcern("majority"),
        read_preference=ReadPreference.PRIMARY,
    )


@asynccontextmanager
async def transaction(client: AsyncMongoClient[dict[str, Any]]) -> AsyncIterator[AsyncClientSession]:
    """A session in a transaction (:func:`start_transaction`): committed when the block ends,
    unless the block aborted it; aborted when the block raises."""
    async with client.start_session() as session:
        await start_transaction(session)
        try:
            yield session
        except BaseException:
            if session.in_transaction:
                await session.abort_transaction()  # best effort: it never raises
            raise
        if session.in_transaction:
            await session.commit_transaction()


async def reach(client: AsyncMongoClient[dict[str, Any]], seconds: float) -> None:
    """Fail within ``seconds`` when the store does not answer (a ping under its own deadline).

    With ``timeoutMS`` set PyMongo waits the whole deadline to select a server (20 s by
    default) before the first call fails: a command started against a stopped store
    said nothing for that long.
    """
    with pymongo.timeout(seconds):
        await client.admin.command("ping")
