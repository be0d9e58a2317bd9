"""The boundaries of a real deployment, played in a fault schedule: a lagging shard and its failover,
a cluster that answers as a mongos, ledgers deleted or restored older than their documents, a
lease holder paused past a take-over.

Drawn from the schedule's seed (:func:`draw_boundaries`). The lag and the mongos are the fault
proxy's (:mod:`pipeline.testing.mongofault`) and run during the chaos drill; the ledger and the
lease are operator-side faults, played once the drill has caught up (:func:`ledger_drill`,
:func:`paused_lease_drill`): the pipeline must refuse and say why (a partition held back until
``preagg positions rebuild``; a stale run's writes refused), and after the operator's way out
every counter equals the truth.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.core.families import family_topic
from pipeline.kinds.hits.families import SITES
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops import ledger_rebuild
from pipeline.ops.lease import Lease, LeaseHeld
from pipeline.ops.positions import follow_in_kafka
from pipeline.ops.setup import shard_keys
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.meta import META_COLLECTION
from pipeline.store.offsets import BEHIND, OFFSETS_COLLECTION
from pipeline.testing.audit import audit_hits
from pipeline.testing.chaos import ChaosReport, Crew, catch_up, produce_paced
from pipeline.testing.mongofault import MongoFaultProxy
from pipeline.testing.traffic import generate


@dataclass(frozen=True)
class Boundaries:
    """The boundary faults of one schedule."""

    #: The hits collections' write at which their shard starts to lag, and how many lagged writes
    #: it answers before the failover (``None``: no lag).
    lag: tuple[int, int] | None
    #: The store answers as a mongos reached directly.
    mongos: bool
    #: ``"deleted"``, ``"restored"`` (older than the documents) or ``None``.
    ledger: str | None
    #: A lease holder paused past its expiry comes back after a take-over.
    lease: bool


def draw_boundaries(seed: int) -> Boundaries:
    """The boundary faults of schedule ``seed`` (pure). Every fault appears in every two seeds in a row."""
    rng = random.Random(f"boundaries-{seed}")
    odd = seed % 2 == 1
    return Boundaries(
        lag=(rng.randint(1, 12), rng.randint(2, 6)) if odd else None,
        mongos=not odd,
        ledger=("deleted", "restored")[seed // 2 % 2] if odd or rng.random() < 0.5 else None,
        lease=not odd,
    )


def hits_collections(name: str) -> bool:
    """The hits kind's documents: the lagging shard's (the ledgers live on a healthy one)."""
    return name.startswith("hits_") and name != "hits_secrets"


def mongos_keys(settings: Settings) -> dict[str, tuple[str, ...]]:
    """Each sharded collection's shard key, as the proxy's mongos checks upserts against."""
    return {k.collection: tuple(path for path, _ in k.keys) for k in shard_keys(settings, settings.schema)}


def lag_then_failover(
    proxy: MongoFaultProxy, start: int, answered: int, say: Callable[[str], None], timeout: float = 120.0
) -> threading.Thread:
    """The hits shard lags from its ``start``-th write; in a thread, once ``answered`` lagged writes
    were answered with a write concern error (or ``timeout`` s after the lag began), it fails over.

    Counted from the lag's start, not the schedule's: a failover before the lag began rolled back
    nothing, and the lag that came after lasted to the end (majority reads kept showing the old
    documents, so every flush of the shard met its own marks as "not applied", forever)."""
    proxy.lag_after(start, hits_collections)

    def run() -> None:
        while proxy.lag_armed is not None:
            time.sleep(0.1)
        deadline = time.monotonic() + timeout
        while proxy.injected["write_concern_error"] < answered and time.monotonic() < deadline:
            time.sleep(0.1)
        say(
            f"the hits shard lagged from its write {start} (writes applied, answered wtimeout: "
            f"{proxy.injected['write_concern_error']}); failover: {proxy.failover()} documents rolled back"
        )

    thread = threading.Thread(target=run, name="lagging-shard", daemon=True)
    thread.start()
    return thread


def ledger_drill(
    settings: Settings,
    through: Settings,
    truth: Counter[tuple[str, str, int]],
    variant: str,
    seed: int,
    say: Callable[[str], None],
    injected: Counter[str],
    timeout: float = 240.0,
) -> list[str]:
    """Ledgers deleted, or restored from a snapshot older than the documents, under more traffic: the
    workers must hold the partitions back and count nothing past the hold; ``preagg positions
    rebuild`` (the operator) lets them go on; every hits counter must then equal ``truth`` plus the
    drill's own hits. ``through``: the settings whose store URL is the proxy's."""
    topic = settings.topic("hits")
    snapshot = asyncio.run(_ledgers(settings, topic))
    extra = [generate(300, end=time.time(), days=1, seed=seed * 7919 + i, bad_share=0.0) for i in range(2)]
    crew = Crew(through, ChaosReport(seed, 0, 0, 0), say)
    produce_paced(settings, extra[0].lines, 1.0, 10)
    crew.start("b0")
    catch_up(settings, crew, timeout, [topic])
    crew.stop_all()
    if variant == "deleted":
        asyncio.run(_drop_ledgers(settings, topic))
        say("operator: the hits ledgers deleted, the documents kept")
    else:
        asyncio.run(_restore(settings, snapshot))
        say("operator: the hits ledgers restored from a snapshot older than the documents")
    injected[f"ledger {variant}"] += 1
    produce_paced(settings, extra[1].lines, 1.0, 10)
    crew.start("b1")
    deadline = time.monotonic() + timeout
    try:
        while True:
            crew.reap()
            held = asyncio.run(_held(settings, topic))
            if held:
                rows = asyncio.run(_rebuild(settings, topic))
                # A ledger a worker moved meanwhile is planned again at the next look.
                refused = [r.text() for r in rows if r.refused and r.refused != ledger_rebuild.MOVED]
                if refused:
                    return [f"positions rebuild refused: {r}" for r in refused]
                injected["partitions held, then rebuilt"] += len(held)
                say(f"held back: {held}; operator: preagg positions rebuild --apply")
            try:
                catch_up(settings, crew, 5.0, [topic])
                if not asyncio.run(_held(settings, topic)):
                    break
            except TimeoutError:
                pass
            if time.monotonic() > deadline:
                return [f"the ledger drill did not end within {timeout:.0f}s"]
    finally:
        crew.stop_all()
    want = Counter(truth)
    for t in extra:
        want.update(t.per_minute)
    return asyncio.run(_audit(settings, want))


async def _ledgers(settings: Settings, topic: str) -> list[dict[str, Any]]:
    client = mongo_client(settings.mongo_url or "")
    try:
        return [
            d
            async for d in client[settings.db][OFFSETS_COLLECTION].find({"topic": {"$in": ledgers_of(topic)}})
        ]
    finally:
        await client.close()


async def _drop_ledgers(settings: Settings, topic: str) -> None:
    client = mongo_client(settings.mongo_url or "")
    try:
        await client[settings.db][OFFSETS_COLLECTION].delete_many({"topic": {"$in": ledgers_of(topic)}})
    finally:
        await client.close()


async def _restore(settings: Settings, snapshot: list[dict[str, Any]]) -> None:
    client = mongo_client(settings.mongo_url or "")
    try:
        for d in snapshot:
            await client[settings.db][OFFSETS_COLLECTION].replace_one({"_id": d["_id"]}, d, upsert=True)
    finally:
        await client.close()


async def _held(settings: Settings, topic: str) -> list[int]:
    docs = await _ledgers(settings, topic)
    return sorted({int(d["partition"]) for d in docs if BEHIND in d})


def ledgers_of(topic: str) -> list[str]:
    """The ledgers' topic names of ``topic``: its own and its site rollups' (pipeline/core/families.py)."""
    return [topic, family_topic(topic, SITES)]


async def _rebuild(settings: Settings, topic: str) -> list[ledger_rebuild.RebuildRow]:
    client = mongo_client(settings.mongo_url or "")
    try:
        db = client[settings.db]
        rows = await ledger_rebuild.apply(settings, db, await ledger_rebuild.plan(settings, db, topic, None))
        await follow_in_kafka(settings, ledger_rebuild.kafka_positions(rows))
        return rows
    finally:
        await client.close()


async def _audit(settings: Settings, truth: Counter[tuple[str, str, int]]) -> list[str]:
    client = mongo_client(settings.mongo_url or "")
    try:
        return await audit_hits(client[settings.db], truth, hits_fields(settings.schema))
    finally:
        await client.close()


def paused_lease_drill(settings: Settings, injected: Counter[str]) -> list[str]:
    """A replay's lease holder paused past its expiry comes back after another run took the lease
    over: its writes must be refused and the live run's claims kept."""
    from pipeline.ops.deadletters import REPLAYED_COLLECTION, claim, release_unsent

    async def run() -> list[str]:
        client = mongo_client(settings.mongo_url or "")
        db = client[settings.db]
        name = f"drill {settings.group_id}"
        try:
            paused, live = Lease(db, name), Lease(db, name)
            await paused.take()
            await db[META_COLLECTION].update_one({"_id": paused.id}, {"$set": {"until": 0}})
            await live.take()
            await live.fenced(lambda s: claim(db, name, ["a", "b"], "live", s))
            injected["paused lease holder"] += 1
            problems = []
            for what, write in (
                ("release", lambda s: release_unsent(db, name, ["live"], set(), s)),
                ("claim", lambda s: claim(db, name, ["c"], "paused", s)),
            ):
                try:
                    await paused.fenced(write)
                    problems.append(f"a paused lease holder's {what} went through after a take-over")
                except LeaseHeld:
                    pass
            kept = {d["_id"] async for d in db[REPLAYED_COLLECTION].find({"_id": {"$regex": f"^{name}\\|"}})}
            if kept != {f"{name}|a", f"{name}|b"}:
                problems.append(f"the live run's claims are {sorted(kept)}")
            await live.release()
            return problems
        finally:
            await client.close()

    return asyncio.run(run())
