"""A flush whose ledger is behind its documents writes nothing, wherever in the flush the documents
that show it are (the real driver and store).

The existence probe reads the first few documents of each collection and stops when most exist;
a ledger deleted or restored older than its documents was found only if those few held one of
its marks, and otherwise when the bulk writes met the marks, after the documents lacking them
had been written under a sequence the rebuilt ledger gives out again: counted twice.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pipeline.core.commit import Fence, LedgerBehind
from pipeline.core.marks import MARKS
from pipeline.core.updates import DocUpdate
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.offsets import BEHIND, OFFSETS_COLLECTION
from pipeline.store.sink import MongoSink

pytestmark = pytest.mark.integration

COLL = "behind_docs"


def counts(prefix: str, n: int, partition: int) -> list[DocUpdate]:
    """One counter of ``n`` documents, carrying events of one partition of ``hits``."""
    return [
        DocUpdate(COLL, f"{prefix}{i:03}", {"k": prefix}, inc={"n": 1}, sources=(("hits", partition),))
        for i in range(n)
    ]


def test_a_ledger_behind_its_documents_is_found_before_anything_is_written(settings: Settings) -> None:
    """Partition 1 writes 60 documents, partition 0 ten; partition 0's ledger is deleted. Its next
    flush (a restarted worker) leads with partition 1's 60 documents (they exist, and hold no mark
    of partition 0), then partition 0's ten (its marks: the ledger is behind), then 30 new ones.
    It is refused as behind, and not one document is written."""

    async def run() -> None:
        client = mongo_client(settings.mongo_url or "", timeout=30)
        try:
            db = client[settings.db]
            first = MongoSink(client, settings.db, settings.group_id, "before", "exactly_once")
            await first.commit(counts("a", 60, 1), [Fence("hits", 1, None, 100, begin=0)], "f1", marked=True)
            await first.commit(counts("b", 10, 0), [Fence("hits", 0, None, 100, begin=0)], "f2", marked=True)
            await db[OFFSETS_COLLECTION].delete_many({"topic": "hits", "partition": 0})
            before = {d["_id"]: d async for d in db[COLL].find()}

            after = MongoSink(client, settings.db, settings.group_id, "after", "exactly_once")
            updates = counts("a", 60, 0) + counts("b", 10, 0) + counts("c", 30, 0)
            with pytest.raises(LedgerBehind):
                await after.commit(updates, [Fence("hits", 0, None, 200, begin=100)], "f3", marked=True)
            stored: dict[str, Any] = {d["_id"]: d async for d in db[COLL].find()}
            assert stored == before  # nothing written: no new document, no count, no mark
            ledger = await db[OFFSETS_COLLECTION].find_one({"topic": "hits", "partition": 0})
            assert ledger is not None and BEHIND in ledger
            assert all(MARKS in d for d in stored.values())
        finally:
            await client.close()

    asyncio.run(run())
