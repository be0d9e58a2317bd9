"""The commit token on the embedded store: a commit that takes it while another worker holds it
aborts on its first statement (WriteConflict), before any counter is written."""

from __future__ import annotations

import asyncio
import time

import pytest
from pymongo.errors import OperationFailure

from pipeline.core.commit import Fence
from pipeline.core.updates import DocUpdate
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.errors import is_write_conflict
from pipeline.store.offsets import OFFSETS_COLLECTION, token_id
from pipeline.store.sink import MongoSink

pytestmark = pytest.mark.integration


def test_a_held_token_aborts_the_other_commit_at_once(settings: Settings) -> None:
    async def run() -> None:
        client = mongo_client(settings.mongo_url or "", timeout=20)
        db = client[settings.db]
        await db["counts"].insert_one({"_id": "doc", "n": 0})
        await db[OFFSETS_COLLECTION].insert_one({"_id": token_id(settings.group_id, "hits"), "commits": 0})
        sink = MongoSink(client, settings.db, settings.group_id, "w2", "exactly_once")
        update = DocUpdate("counts", "doc", {})
        update.add("n", 1)
        fence = Fence("hits", 0, None, 10, events=10)
        try:
            # Another worker's transaction holds the token (it took it first, and has not committed).
            async with client.start_session() as other:
                await other.start_transaction()
                await db[OFFSETS_COLLECTION].update_one(
                    {"_id": token_id(settings.group_id, "hits")}, {"$inc": {"commits": 1}}, session=other
                )
                began = time.monotonic()
                with pytest.raises(OperationFailure) as lost:
                    await sink.commit([update], [fence], "f1", token="hits")
                assert is_write_conflict(lost.value) and time.monotonic() - began < 5
                await other.abort_transaction()
            assert (await db["counts"].find_one({"_id": "doc"}) or {})["n"] == 0  # nothing written
            # Released: the same commit goes through, token and counters together.
            await sink.commit([update], [fence], "f1", token="hits")
            assert (await db["counts"].find_one({"_id": "doc"}) or {})["n"] == 1
            token = await db[OFFSETS_COLLECTION].find_one({"_id": token_id(settings.group_id, "hits")})
            assert token is not None and token["commits"] == 1 and token["worker"] == "w2"
            # Ledger reads by group never see the token.
            assert await db[OFFSETS_COLLECTION].count_documents({"group": settings.group_id}) == 1
        finally:
            await client.close()

    asyncio.run(run())
