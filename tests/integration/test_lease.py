"""The operator runs' lease on the embedded store: one holder at a time, taken atomically."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from pipeline.ops.lease import Lease, LeaseHeld
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.meta import META_COLLECTION

from .helpers import cli, run_cli

pytestmark = pytest.mark.integration


def test_one_of_many_concurrent_takers_holds_the_lease_until_it_releases_or_expires(
    settings: Settings,
) -> None:
    """Two `deadletters replay` runs at once must not both go on."""

    async def run() -> None:
        client = mongo_client(settings.mongo_url or "", timeout=20)
        db = client[settings.db]
        try:
            leases = [Lease(db, "replay") for _ in range(8)]
            got = await asyncio.gather(*(lease.take() for lease in leases), return_exceptions=True)
            winners = [lease for lease, g in zip(leases, got, strict=True) if g is None]
            assert len(winners) == 1 and all(isinstance(g, LeaseHeld) or g is None for g in got), got
            holder = winners[0]
            await holder.take()  # renewing is taking again
            other = next(lease for lease in leases if lease is not holder)
            with pytest.raises(LeaseHeld, match="holds its lease"):
                await other.take()
            await holder.release()
            await other.take()
            # Expired: the next taker wins, and the old holder's renewal fails.
            await db[META_COLLECTION].update_one({"_id": other.id}, {"$set": {"until": 0}})
            await holder.take()
            with pytest.raises(LeaseHeld):
                await other.take()
            await holder.release()
            # A holder of this machine (same PID namespace, same boot) whose process has ended frees
            # the lease at once; the same PID in another namespace proves nothing.
            done = subprocess.run(
                [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
            )
            dead = int(done.stdout.decode().strip())
            gone = {**holder.proc, "pid": dead, "start": 1}
            far = 2**62
            await db[META_COLLECTION].update_one(
                {"_id": holder.id},
                {"$set": {"owner": "gone", "token": 7, "proc": {**gone, "ns": -1}, "until": far}},
                upsert=True,
            )
            with pytest.raises(LeaseHeld):
                await other.take()
            await db[META_COLLECTION].update_one({"_id": holder.id}, {"$set": {"proc": gone}})
            await other.take()
            assert other.token == 8
        finally:
            await client.close()

    asyncio.run(run())


def test_a_second_replay_refuses_while_another_holds_the_lease(settings: Settings) -> None:
    async def hold() -> Lease:
        client = mongo_client(settings.mongo_url or "", timeout=20)
        lease = Lease(client[settings.db], f"deadletters replay of {settings.deadletter_topic}")
        await lease.take()
        await client.close()
        return lease

    asyncio.run(hold())  # held by this (live) test process
    busy = run_cli(settings, "deadletters", "replay", "--reason", "late")
    assert busy.returncode == 3 and "holds its lease" in busy.stderr, busy  # EXIT_BUSY: run it again later
    assert len(busy.stderr.strip().splitlines()) == 1
    assert "nothing to send" in cli(settings, "deadletters", "show", "--reason", "late")  # reads only


def test_a_paused_holder_that_comes_back_after_a_take_over_writes_nothing(settings: Settings) -> None:
    """The old holder's lease expired while it was paused (on the store's clock); another run took it
    over and claimed events. Back, the old holder's claims and releases are refused, and its
    renewal tells it to stop. Before the fence they went through: it released the live run's
    claims, and the events were replayed twice."""
    from pipeline.ops.deadletters import REPLAYED_COLLECTION, claim, release_unsent

    async def run() -> None:
        client = mongo_client(settings.mongo_url or "", timeout=20)
        db = client[settings.db]
        try:
            paused, live = Lease(db, "replay"), Lease(db, "replay")
            await paused.take()
            await db[META_COLLECTION].update_one({"_id": paused.id}, {"$set": {"until": 0}})  # expired
            await live.take()
            assert (paused.token, live.token) == (1, 2)
            assert await live.fenced(lambda s: claim(db, "late", ["k1", "k2"], "live-run", s)) == {"k1", "k2"}
            with pytest.raises(LeaseHeld, match="stale"):
                await paused.fenced(lambda s: release_unsent(db, "late", ["live-run"], set(), s))
            with pytest.raises(LeaseHeld, match="stale"):
                await paused.fenced(lambda s: claim(db, "late", ["k3"], "paused-run", s))
            with pytest.raises(LeaseHeld):
                await paused.take()
            claims = {d["_id"] async for d in db[REPLAYED_COLLECTION].find({})}
            assert claims == {"late|k1", "late|k2"}
            await live.release()
            with pytest.raises(LeaseHeld, match="while this run was away"):
                await paused.take()  # free again, but under a new token: what it read is stale
            await live.take()  # it gave the lease back
            assert live.token == 4
        finally:
            await client.close()

    asyncio.run(run())
