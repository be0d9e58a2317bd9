"""A topic deleted and recreated under its ledger: the worker holds the partitions back and says so,
status shows it, ``preagg positions reset`` decides, and counts are exact afterwards."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import orjson
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from pipeline.kafka.admin import TopicSpec, ensure_topics
from pipeline.kafka.options import KafkaConnection, kafka_client_kwargs
from pipeline.kinds.hits.files import hit_key
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import group_lag, wait_caught_up
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.settings import Settings
from pipeline.worker.exits import EXIT_FENCED
from pipeline.worker.process import WorkerProcess

from .helpers import cli, produce, run_worker_to_end, with_db

pytestmark = pytest.mark.integration

DAY = 1_700_000_000


def hits(n: int, page: str) -> list[tuple[bytes, bytes]]:
    return [
        (
            orjson.dumps({"site": "r.example", "page": f"{page}{i % 9}", "ts": DAY + i}),
            hit_key("r.example", f"{page}{i % 9}"),
        )
        for i in range(n)
    ]


async def recreate(settings: Settings, topic: str) -> None:
    admin = AIOKafkaAdminClient(**kafka_client_kwargs(settings))
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()
    for _ in range(50):
        try:
            await ensure_topics(KafkaConnection.of(settings), [topic], TopicSpec.of(settings))
            return
        except Exception:  # the deletion may still be in progress
            await asyncio.sleep(0.2)
    await ensure_topics(KafkaConnection.of(settings), [topic], TopicSpec.of(settings))


def ledger(settings: Settings) -> list[dict[str, Any]]:
    async def read(db: Any) -> list[dict[str, Any]]:
        return await read_ledger(db, settings.group_id, [settings.topic("hits")])

    result: list[dict[str, Any]] = with_db(settings, read)
    return result


def test_recreated_topic_is_held_back_until_reset_then_counted_exactly(settings: Settings) -> None:
    topic = settings.topic("hits")
    asyncio.run(produce(settings, hits(1000, "/a"), pack=10))
    run_worker_to_end(settings)
    assert ledger_totals(ledger(settings)).events == 1000

    asyncio.run(recreate(settings, topic))
    asyncio.run(produce(settings, hits(500, "/b"), pack=10))

    worker = WorkerProcess(settings, "after-recreate").start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if all("diverged" in d for d in ledger(settings)):
                break
            time.sleep(1)
        docs = ledger(settings)
        assert all("diverged" in d for d in docs), docs
        assert ledger_totals(docs).events == 1000  # nothing of the new log counted, nothing skipped
        status = json.loads(cli(settings, "status", "--interval", "0", "--json"))
        assert any("held back" in p for p in status["problems"]), status["problems"]
        assert "PROBLEM" in cli(settings, "status", "--interval", "0")

        dry = cli(settings, "positions", "reset", "--topic", topic, "--to", "earliest")
        assert "dry run" in dry and "DIVERGED" in dry
        assert all("diverged" in d for d in ledger(settings))  # a dry run changes nothing
        assert "applied" in cli(
            settings, "positions", "reset", "--topic", topic, "--to", "earliest", "--apply"
        )
        assert worker.proc is not None
        assert worker.proc.wait(60) == EXIT_FENCED  # it noticed the reset and restarts from it
    finally:
        worker.terminate()
    run_worker_to_end(settings, "after-reset")
    docs = ledger(settings)
    assert not any("diverged" in d for d in docs)
    assert ledger_totals(docs).events == 1500

    async def counted(db: Any) -> int:
        f = "hits_monthly"
        return sum([d.get("t", 0) async for d in db[f].find({})])

    assert with_db(settings, counted) == 1500


def test_a_worker_outside_a_supervisor_restarts_in_place_after_a_reset(settings: Settings) -> None:
    """`preagg positions reset --apply` printed "the workers restart" while the README's
    `preagg worker &` exited 75 and nothing restarted it. Now the same process restarts in place
    (same PID) and counts what the reset asked for."""
    topic = settings.topic("hits")
    asyncio.run(produce(settings, hits(300, "/a"), pack=10))
    run_worker_to_end(settings)
    asyncio.run(recreate(settings, topic))
    asyncio.run(produce(settings, hits(200, "/b"), pack=10))
    worker = WorkerProcess(settings, "in-place", restart=True).start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all("diverged" in d for d in ledger(settings)):
            time.sleep(1)
        assert all("diverged" in d for d in ledger(settings))
        cli(settings, "positions", "reset", "--topic", topic, "--to", "earliest", "--apply")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and ledger_totals(ledger(settings)).events < 500:
            time.sleep(1)
        assert worker.alive(), worker.log_path.read_text()[-3000:]  # the same process, restarted
        assert ledger_totals(ledger(settings)).events == 500
    finally:
        rc = worker.terminate()
    log = worker.log_path.read_text()
    assert "restarting in place (1 of 5" in log and rc == 0, log[-3000:]


def counted(settings: Settings) -> int:
    f = hits_fields(settings.schema).daily

    async def total(db: Any) -> int:
        return sum([d.get(f.total, 0) async for d in db[f.collection].find({})])

    result: int = with_db(settings, total)
    return result


def test_a_new_group_id_neither_counts_the_log_again_nor_starts_without_adopting(settings: Settings) -> None:
    """Ledgers are per group, counters are shared: group B must not count group A's log again."""
    asyncio.run(produce(settings, hits(300, "/g"), pack=10))
    run_worker_to_end(settings, "group-a")
    before = counted(settings)
    assert before == 300

    b = settings.with_(group_id=settings.group_id + "-b")
    w = WorkerProcess(b, "group-b").start()
    assert w.proc is not None and w.proc.wait(60) == 2
    w.terminate()
    refused = [x for x in w.log_path.read_text().splitlines() if "would count the retained log again" in x]
    assert len(refused) == 1, w.log_path.read_text()[-2000:]
    assert f"preagg positions adopt --from-group {settings.group_id} --apply" in refused[0]
    assert counted(settings) == 300

    dry = cli(b, "positions", "adopt", "--from-group", settings.group_id)
    assert "dry run" in dry and f"{settings.topic('hits')}[0]" in dry
    cli(b, "positions", "adopt", "--from-group", settings.group_id, "--apply")
    assert ledger(settings) == []  # the old group's ledgers moved: its workers would be fenced
    asyncio.run(produce(b, hits(50, "/h"), pack=10))
    run_worker_to_end(b, "group-b")
    assert counted(b) == 350  # the retained 300 once, plus the 50 new ones
    assert ledger_totals(ledger(b)).events == 350  # the adopted figures carry on


def test_a_reset_with_the_worker_stopped_then_started_by_hand_counts_the_new_log(settings: Settings) -> None:
    """The "reset that resets nothing": the topic recreated under a running worker, the
    worker stopped, `preagg positions reset --to earliest --apply`, a worker started by hand:
    it must count the new log, and one more event after it."""
    topic = settings.topic("hits")
    running = WorkerProcess(settings, "before").start()
    try:
        asyncio.run(produce(settings, hits(400, "/a"), pack=10))
        asyncio.run(wait_caught_up(settings, [topic], timeout=120))
        asyncio.run(recreate(settings, topic))
        asyncio.run(produce(settings, hits(250, "/b"), pack=10))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all("diverged" in d for d in ledger(settings)):
            time.sleep(1)
        assert all("diverged" in d for d in ledger(settings)), running.log_path.read_text()[-6000:]
    finally:
        running.terminate()
    cli(settings, "positions", "reset", "--topic", topic, "--to", "earliest", "--apply")
    run_worker_to_end(settings, "by-hand")
    assert ledger_totals(ledger(settings)).events == 650
    asyncio.run(produce(settings, hits(1, "/c"), pack=1))
    run_worker_to_end(settings, "by-hand-again")
    assert ledger_totals(ledger(settings)).events == 651
    assert counted(settings) == 651


def wait_counted(settings: Settings, events: int, timeout: float) -> int:
    """The ledgers' event count once it reaches ``events`` (or whatever it is after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while (got := ledger_totals(ledger(settings)).events) < events and time.monotonic() < deadline:
        time.sleep(1)
    return got


def drop_counts_and_rewind(settings: Settings, to: int) -> None:
    """What restoring an older backup of the ledgers does, with the counts dropped for a recount:
    every ledger of the hits topic back to ``to``, the data collections gone."""

    async def rewind(db: Any) -> None:
        for name in await db.list_collection_names():
            if name.startswith("hits_"):
                await db[name].drop()
        await db["preagg_offsets"].update_many({"topic": settings.topic("hits")}, {"$set": {"next": to}})

    with_db(settings, rewind)


def test_a_ledger_behind_kafka_takes_effect_at_assignment_on_a_quiet_topic(settings: Settings) -> None:
    """A worker assigned partitions whose ledgers are behind Kafka's committed offsets (a restored
    backup, a reset, an adopt) must resume from the ledgers at once. Before the fix it compared
    positions only when a record arrived: on a quiet topic none came, and nothing was counted."""
    topic = settings.topic("hits")
    asyncio.run(produce(settings, hits(300, "/a"), pack=10))
    run_worker_to_end(settings, "first")
    drop_counts_and_rewind(settings, 0)
    quiet = WorkerProcess(settings, "quiet", restart=True).start()
    try:
        got = wait_counted(settings, 600, timeout=60)
    finally:
        quiet.terminate()
    assert got == 600, quiet.log_path.read_text()[-4000:]
    assert counted(settings) == 300
    lags = asyncio.run(group_lag(settings, [topic]))
    assert all(p.lag == 0 for p in lags), lags


def test_a_reset_moves_kafkas_committed_offsets_with_the_ledgers(settings: Settings) -> None:
    """`positions reset --apply` with no worker in the group: Kafka's committed offsets equal the
    ledgers it wrote, so a lag-based autoscaler and a starting worker see the same position. (A
    group with members refuses a commit from outside it, as Kafka's own reset tool is refused; the
    workers then make Kafka follow at their next assignment, tested above.)"""
    topic = settings.topic("hits")
    asyncio.run(produce(settings, hits(300, "/a"), pack=10))
    out = cli(settings, "positions", "reset", "--topic", topic, "--to", "latest", "--apply")
    lags = asyncio.run(group_lag(settings, [topic]))
    assert [p.committed for p in lags] == [p.end for p in lags], (out, lags)
    assert all(p.end > 0 for p in lags), lags
    assert f"Kafka's committed offsets of group {settings.group_id} now equal these positions" in out


def test_offsets_lost_before_counting_are_a_problem_until_acknowledged(settings: Settings) -> None:
    """What a worker records when Kafka's log start passed a ledger (the embedded broker cannot
    delete records: the guard's finding is unit-tested, its record is written here as the worker
    writes it): `preagg status` shows a PROBLEM naming the offsets and the way out, until
    `preagg positions acknowledge` clears it."""
    from pipeline.store.client import mongo_client
    from pipeline.store.sink import MongoSink

    topic = settings.topic("hits")
    asyncio.run(produce(settings, hits(100, "/a"), pack=10))
    run_worker_to_end(settings, "first")

    async def note() -> None:
        client = mongo_client(settings.mongo_url or "", timeout=20)
        try:
            await MongoSink(client, settings.db, settings.group_id, "w").note_lost((topic, 0), 3, 9)
        finally:
            await client.close()

    asyncio.run(note())
    status = cli(settings, "status")
    assert f"PROBLEM {topic}[0]: offsets 3..8 were deleted from Kafka" in status, status
    assert f"preagg positions acknowledge --topic {topic} --partition 0" in status
    out = cli(settings, "positions", "acknowledge", "--topic", topic, "--partition", "0")
    assert f"acknowledged: {topic}[0] offsets 3..8 lost before they were counted" in out
    assert "were deleted from Kafka" not in cli(settings, "status")
    (doc,) = [d for d in ledger(settings) if d["partition"] == 0]
    assert doc["offsets_lost"] == 6 and doc["lost_acknowledged"]["to"] == 9
