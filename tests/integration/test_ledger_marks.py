"""The ledger and the documents agree, or the partition stops: a ledger deleted under its documents,
or restored older than them, holds its partitions back (ERROR, readiness, a PROBLEM in status)
until `preagg positions rebuild` rebuilds it from the marks; then every count is exact."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pipeline.ops.lag import wait_caught_up
from pipeline.services.embedded import free_port
from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

from .helpers import cli, produce, run_cli, run_worker_to_end, with_db
from .test_ledger_safety import counted, hits
from .test_slow_store import health

pytestmark = pytest.mark.integration


def ledgers(settings: Settings) -> list[dict[str, Any]]:
    async def read(db: Any) -> list[dict[str, Any]]:
        return [d async for d in db["preagg_offsets"].find({"topic": settings.topic("hits")})]

    result: list[dict[str, Any]] = with_db(settings, read)
    return result


def wait_until(what: str, done: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(1)


def held_then_rebuilt(settings: Settings, before: int, expected: int) -> None:
    """Start a worker, see it hold the partition back (``before`` counted: nothing written past the
    hold), rebuild, see every count exact (``expected``)."""
    topic = settings.topic("hits")
    web = free_port()
    # Batches of 3 s: the range read again is one batch, never one of the old flushes' ranges by chance
    # (one fetch a produce call would make each old flush again, rightly "applied", and hold nothing).
    worker = WorkerProcess(settings.with_(web_port=web, flush_interval=3.0), "after", restart=True).start()
    try:
        wait_until(
            "the partition held back",
            lambda: "preagg positions rebuild" in run_cli(settings, "status").stdout,
        )
        status = run_cli(settings, "status").stdout
        assert "PROBLEM" in status and "the ledger is behind the documents" in status, status
        wait_until("readiness to fail", lambda: health(web) == 503)
        log = worker.log_path.read_text()
        assert "ERROR" in log and "holds flush" in log, log[-3000:]
        plan = cli(settings, "positions", "rebuild", "--topic", topic)
        assert "-> next=" in plan and "dry run" in plan, plan
        assert counted(settings) == before  # nothing written past the hold
        out = cli(settings, "positions", "rebuild", "--topic", topic, "--apply")
        assert "applied" in out and "REFUSED" not in out, out
        wait_until("every event counted", lambda: counted(settings) >= expected)
        asyncio.run(wait_caught_up(settings, [topic], timeout=120))
    finally:
        worker.terminate()
    assert counted(settings) == expected, worker.log_path.read_text()[-3000:]
    assert not any("behind" in d or "diverged" in d for d in ledgers(settings))


def test_a_ledger_deleted_under_its_documents_holds_back_until_rebuilt(settings: Settings) -> None:
    """1,000 hits counted, the ledgers deleted, 500 more of the same pages: before, the new intents
    started their sequence again below the documents' marks and every write read as already
    applied (1,000 of 1,500, the worker saying "500 events counted")."""
    asyncio.run(produce(settings, hits(1_000, "/a"), pack=10))
    run_worker_to_end(settings, "first")

    async def drop(db: Any) -> None:
        await db["preagg_offsets"].delete_many({"group": settings.group_id})

    with_db(settings, drop)
    asyncio.run(produce(settings, hits(500, "/a"), pack=10))
    held_then_rebuilt(settings, 1_000, 1_500)


def test_a_ledger_restored_older_than_its_documents_holds_back_until_rebuilt(settings: Settings) -> None:
    """The ledgers restored from a backup taken after 1,000 hits, the documents holding 1,500 counted
    by two flushes since: read again, the 500 come as one flush under the sequence of the first, and
    the marks' ranges tell it from both. Held back, rebuilt from the marks: exactly 1,500, and the
    next hit counts. (Restored one flush behind, the range read again is that very flush: its
    marks say "applied", which is true, and nothing is held.)"""
    topic = settings.topic("hits")
    asyncio.run(produce(settings, hits(1_000, "/a"), pack=10))
    run_worker_to_end(settings, "first")
    backup = ledgers(settings)
    second = WorkerProcess(settings, "second").start()
    try:
        for _ in range(2):  # two flushes past the backup
            asyncio.run(produce(settings, hits(250, "/a"), pack=10))
            asyncio.run(wait_caught_up(settings, [topic], timeout=120))
    finally:
        second.terminate()
    assert counted(settings) == 1_500

    async def restore(db: Any) -> None:
        for d in backup:
            await db["preagg_offsets"].replace_one({"_id": d["_id"]}, d)

    with_db(settings, restore)
    held_then_rebuilt(settings, 1_500, 1_500)
    asyncio.run(produce(settings, hits(1, "/b"), pack=1))
    run_worker_to_end(settings, "third")
    assert counted(settings) == 1_501


def test_a_rebuild_moves_only_ledgers_behind_and_only_as_planned(settings: Settings) -> None:
    """A partition being counted is left alone (its worker may be mid-flush: moving its ledger would
    count that flush twice), and a ledger that moved between the plan and the apply (a worker
    flushed it) is not overwritten: its row comes back refused, to be planned again."""
    from pipeline.ops import ledger_rebuild

    topic = settings.topic("hits")
    asyncio.run(produce(settings, hits(300, "/a"), pack=10))
    run_worker_to_end(settings, "first")

    async def plan(db: Any) -> list[ledger_rebuild.RebuildRow]:
        return await ledger_rebuild.plan(settings, db, topic, None)

    rows = with_db(settings, plan)
    assert rows and all(r.settled and r.new_next is None for r in rows), [r.text() for r in rows]

    async def drop_plan_then_a_worker_moves(db: Any) -> list[ledger_rebuild.RebuildRow]:
        await db["preagg_offsets"].delete_many({"group": settings.group_id})
        planned = await ledger_rebuild.plan(settings, db, topic, None)
        assert planned and all(r.new_next is not None for r in planned), [r.text() for r in planned]
        first = planned[0]
        await db["preagg_offsets"].insert_one(
            {
                "_id": f"{settings.group_id}|{first.topic}|{first.partition}",
                "group": settings.group_id,
                "topic": first.topic,
                "partition": first.partition,
                "next": 5,
                "seq": 1,
            }
        )
        return await ledger_rebuild.apply(settings, db, planned)

    applied = with_db(settings, drop_plan_then_a_worker_moves)
    assert "moved while the rebuild was planned" in (applied[0].refused or ""), applied[0].text()
    assert all(r.refused is None for r in applied[1:]), [r.text() for r in applied]
    moved = [d for d in ledgers(settings) if d["partition"] == applied[0].partition and d["topic"] == topic]
    assert [(d["next"], d["seq"]) for d in moved] == [(5, 1)]
