"""Exact at the boundaries of a real deployment: a shard whose writes a failover rolls back, a
cluster that answers as a mongos behind a direct connection. Real workers, the real driver, the
fault proxy in front of the store; every test ends with an audit of every counter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest

from pipeline.ops.lag import wait_caught_up
from pipeline.ops.setup import shard_keys
from pipeline.services.embedded import Endpoints
from pipeline.settings import Settings
from pipeline.testing.mongofault import FaultRates, MongoFaultProxy
from pipeline.testing.traffic import Traffic, generate
from pipeline.worker.process import WorkerProcess

from .helpers import audit_traffic, produce

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(services: Endpoints) -> Iterator[MongoFaultProxy]:
    p = MongoFaultProxy(services.mongo_url, FaultRates(), seed=55).start()
    try:
        yield p
    finally:
        p.stop()


def hits_collections(name: str) -> bool:
    """The hits kind's documents (not the ledgers, the name store or the salt): the lagging shard's."""
    return name.startswith("hits_") and name != "hits_secrets"


def counted_through(
    settings: Settings, proxy: MongoFaultProxy, traffic: Traffic, name: str, during: Callable[[], None]
) -> str:
    """A worker through the proxy while ``during`` runs, until the group counted everything; the
    audit of every counter must be clean. The worker's log."""
    worker = WorkerProcess(settings.with_(mongo_url=proxy.url), name).start()
    try:
        during()
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))
    finally:
        code = worker.terminate()
    log = worker.log_path.read_text()
    assert code in (0, 75), log[-3000:]
    problems, events = audit_traffic(settings, traffic)
    assert problems == [], problems[:10]
    assert events == len(traffic.lines)
    return log


def wait_for(what: str, done: object, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_writes_a_failover_rolls_back_are_written_again_not_counted(
    settings: Settings, proxy: MongoFaultProxy
) -> None:
    """A shard lags: every write to the hits collections applies on its primary and is answered with
    a write concern error (alone at first, then beside the duplicate keys a retry meets on its own
    marks); the failover then rolls those writes back. The retry must not read its unreplicated
    marks as "already applied": before the fix it moved the ledger, and the rollback lost the
    600 events for good (1,000 of 1,600 counted)."""
    settings = settings.with_(partitions=3)
    traffic = generate(1_600, end=time.time(), days=1, seed=55, bad_share=0.0)
    topic = settings.topic("hits")
    asyncio.run(produce(settings, traffic.lines[:1_000], pack=1))

    def lag_then_failover() -> None:
        asyncio.run(wait_caught_up(settings, [topic], timeout=180))
        proxy.lag(hits_collections)
        asyncio.run(produce(settings, traffic.lines[1_000:], pack=1))
        wait_for(
            "a retry to meet its own unreplicated marks",
            lambda: proxy.injected["write_concern_error_beside_duplicate"] >= 2,
        )
        assert proxy.failover() > 0

    log = counted_through(settings, proxy, traffic, "lagged", lag_then_failover)
    assert "no majority acknowledged it" in log


def test_a_mongos_behind_a_direct_connection_gets_its_shard_keys(
    settings: Settings, proxy: MongoFaultProxy
) -> None:
    """The store answers as a mongos reached with ``directConnection=true`` (as through a load
    balancer): the driver's topology is not ``Sharded``, yet every upsert on a sharded collection
    needs its whole shard key. Before the fix the sink asked the driver, left the key out, and
    every flush failed with ShardKeyNotFound for ever (retried as transient, the ledger frozen)."""
    keys = shard_keys(settings, settings.schema)
    proxy.mongos = {k.collection: tuple(path for path, _ in k.keys) for k in keys}
    settings = settings.with_(partitions=2)
    traffic = generate(400, end=time.time(), days=1, seed=61, bad_share=0.0)
    asyncio.run(produce(settings, traffic.lines, pack=1))
    counted_through(settings, proxy, traffic, "routed", lambda: None)
    assert proxy.injected["shard_key_not_found"] == 0, proxy.injected
