"""What a worker needs of MongoDB, made in one place: the client, the database, the sink, the
checks before counting, and the record of its partitions.

The worker (pipeline/worker/) sees these through the commit port and a small protocol of
its own, never PyMongo: the entry point makes a :class:`WorkerStore` and hands it over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from pipeline.core.errors import EXIT_USAGE, PreaggError
from pipeline.core.fields import check_mode
from pipeline.settings import Settings, redact_url
from pipeline.store.client import mongo_client, primary, reach
from pipeline.store.members import record_assignment
from pipeline.store.meta import claim_schema_mode, supports_transactions
from pipeline.store.owners import groups_by_topic, refusal
from pipeline.store.sink import EXACTLY_ONCE, MongoSink

log = logging.getLogger("preagg.worker")

#: What a worker runs before it joins its group: check its topics and collections (or create
#: them, with auto setup). Log lines, or a one-line refusal. The entry point passes
#: :func:`pipeline.ops.setup.worker_setup` (the worker knows no operator command).
Setup = Callable[[Settings, AsyncMongoClient[dict[str, Any]]], Awaitable[tuple[list[str], str | None]]]


class StoreRefused(PreaggError):
    """The store cannot serve this worker as configured (no transactions, another schema mode)."""

    exit_code: ClassVar[int] = EXIT_USAGE


class WorkerStore:
    """One worker's MongoDB: its client, the database on the primary, and the sink its flushes commit to."""

    def __init__(self, settings: Settings, fault: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        #: Failures a retry may cure (the store away, a deadline passed).
        self.errors: tuple[type[Exception], ...] = (PyMongoError,)
        self.client: AsyncMongoClient[dict[str, Any]] = mongo_client(
            settings.mongo_url or "", timeout=settings.mongo_timeout
        )
        self.db = primary(self.client, settings.db)
        self.sink = MongoSink(
            self.client,
            settings.db,
            settings.group_id,
            settings.worker_id,
            settings.commit_mode,
            fault=fault,
            max_bytes=settings.commit_max_bytes,
            commit_timeout=settings.commit_timeout,
            read_chunk=settings.read_chunk,
        )

    async def prepare(self) -> None:
        """Checks before the first flush: transactions, the database's field-name mode."""
        s = self.settings
        mode = check_mode(s.schema)
        if s.commit_mode == EXACTLY_ONCE and not await supports_transactions(self.client, s.db):
            raise StoreRefused(
                f"MongoDB at {redact_url(s.mongo_url or '')} runs no transactions (standalone server?): "
                "exactly-once needs a replica set or a sharded cluster. Convert it to a single-node "
                "replica set, or set PREAGG_COMMIT_MODE=at_least_once and accept double counts after crashes."
            )
        stored_mode = await claim_schema_mode(self.db, mode)
        if stored_mode != mode:
            raise StoreRefused(
                f"database {s.db!r} holds {stored_mode} field names but this worker is set to {mode} "
                "(PREAGG_SCHEMA): one database, one schema mode"
            )

    async def record_assignment(self, member: str, held: list[str]) -> None:
        """What this member holds, for ``preagg status`` (brokers may not say): best effort."""
        try:
            await record_assignment(self.db, self.settings.group_id, member, self.settings.worker_id, held)
        except PyMongoError as exc:
            log.info("could not record this worker's partitions for preagg status (%s)", exc)

    async def close(self) -> None:
        await self.client.close()


async def worker_ready(settings: Settings, setup: Setup, topics: list[str]) -> tuple[list[str], str | None]:
    """Before a worker joins: its topics and collections (``setup``), and whether another group
    already counts ``topics`` into this database (a one-line refusal)."""
    client = mongo_client(settings.mongo_url or "", timeout=settings.mongo_timeout)
    try:
        await reach(client, settings.connect_timeout)
        lines, refused = await setup(settings, client)
        if refused is None:
            refused = refusal(settings.group_id, await groups_by_topic(primary(client, settings.db), topics))
        return lines, refused
    finally:
        await client.close()
