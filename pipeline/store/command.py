"""One command's trip to the database: open a client, check it answers, run a query, close.

The CLI's commands (the kinds' queries among them) each run one such trip; PyMongo
is imported on the first trip, not when the command's module is, so ``preagg
--help`` never loads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.store.client import Db

T = TypeVar("T")


def on_db(s: Settings, query: Callable[[Db], Awaitable[T]], primary_reads: bool = False) -> T:
    """Run one async query against the configured database, then close the client.

    ``primary_reads``: read from the primary whatever the URL says (operator commands
    about ledgers); analysts' queries keep the URL's read preference.
    """
    from pipeline.store.client import mongo_client, primary, reach

    async def run() -> T:
        client = mongo_client(s.mongo_url or "")
        try:
            await reach(client, s.connect_timeout)
            return await query(primary(client, s.db) if primary_reads else client[s.db])
        finally:
            await client.close()

    return asyncio.run(run())
