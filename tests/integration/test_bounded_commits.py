"""Flushes that always finish: the listens livelock once met, and a stop that always ends.

The livelock: a listens stream whose (user, tag) documents already exist makes
every flush a read-modify-write of thousands of stored documents. One unbounded
transaction per flush outlived the store's transaction lifetime and was resent
identically forever. Here the same traffic (3,000 documents, produced twice) must
commit in bounded transactions, split when a commit is refused for its size, and
end with every sketch and filter exact.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import time
from collections import defaultdict
from pathlib import Path

import orjson
import pytest

from pipeline.core.hll import decode
from pipeline.core.ids import id_bytes
from pipeline.kafka.producer import EventProducer
from pipeline.kinds import named
from pipeline.kinds.listens import KIND as LISTENS
from pipeline.kinds.listens.layout import listen_fields, listen_id
from pipeline.kinds.listens.query import heard_in
from pipeline.ops.lag import wait_caught_up
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.services.embedded import EmbeddedServices
from pipeline.services.urls import for_embedded
from pipeline.settings import Settings
from pipeline.worker.exits import EXIT_SHUTDOWN_DEADLINE
from pipeline.worker.process import WorkerProcess

from .helpers import produce, with_db

pytestmark = pytest.mark.integration

USERS, TAGS, PER_ROUND, PACK = 120, 25, 12_000, 100
MAX_DOCS, MAX_BYTES = 500, 400_000
FLUSHED = re.compile(r"flushed listens: (\d+) events, .*?, (\d+) docs, (\d+) bytes in ([\d.]+)s")


def listens_round(rng: random.Random, truth: dict[tuple[int, int], set[int]]) -> list[bytes]:
    """``PER_ROUND`` listens over every (user, tag) document, times within the last 5 days."""
    now = time.time()
    out = []
    for i in range(PER_ROUND):
        user, tag = i % USERS, (i // USERS) % TAGS
        song = rng.randrange(2000)
        truth[(user, tag)].add(song)
        ts = round(now - rng.random() * 5 * 86400)
        out.append(orjson.dumps({"user": user, "tag": tag, "song": song, "ts": ts}))
    return out


async def send(settings: Settings, lines: list[bytes]) -> None:
    async with EventProducer(settings, settings.topic("listens"), PACK) as p:
        for line in lines:
            await p.send_raw(line, id_bytes(int(orjson.loads(line)["user"])))


def test_flushes_touching_thousands_of_stored_documents_stay_bounded_and_exact(settings: Settings) -> None:
    settings = settings.with_(flush_interval=1.0, commit_max_docs=MAX_DOCS, commit_max_bytes=MAX_BYTES)
    rng = random.Random(12)
    truth: dict[tuple[int, int], set[int]] = defaultdict(set)
    first, second = listens_round(rng, truth), listens_round(rng, truth)
    worker = WorkerProcess(settings, "bounded").start()
    try:
        asyncio.run(send(settings, first))
        asyncio.run(wait_caught_up(settings, [settings.topic("listens")], timeout=300))
        asyncio.run(send(settings, second))  # the same 3,000 documents, now stored: read-modify-write
        asyncio.run(wait_caught_up(settings, [settings.topic("listens")], timeout=300))
    finally:
        rc = worker.terminate()
    log = worker.log_path.read_text()
    assert rc == 0, log[-3000:]

    commits = [(int(d), int(b), float(s)) for _, d, b, s in FLUSHED.findall(log)]
    assert commits, log[-3000:]
    # Sealed at the bound after the message that reached it: one packed message may add PACK documents.
    assert max(d for d, _, _ in commits) <= MAX_DOCS + PACK, commits
    assert max(b for _, b, _ in commits) <= MAX_BYTES, commits
    # 6,000 document writes (3,000 documents, twice) cannot fit in fewer bounded commits than this.
    assert len(commits) >= 2 * USERS * TAGS // (MAX_DOCS + PACK), commits
    assert "MongoDB commit failed" not in log
    print(f"\n{len(commits)} commits, {log.count('split into')} split for their size, max {max(commits)}")

    f = listen_fields(settings.schema)
    ls = settings.of(LISTENS)
    spec = ls.heard()

    def check(db):  # type: ignore[no-untyped-def]
        async def run():  # type: ignore[no-untyped-def]
            wrong = []
            docs = {d["_id"]: d async for d in db[f["collection"]].find()}
            for (user, tag), songs in truth.items():
                doc = docs.get(listen_id(user, tag))
                if doc is None:
                    wrong.append(f"{user}|{tag}: missing")
                    continue
                whole = decode(bytes(doc[f["whole"]]))
                if whole.estimate() != len(songs):  # explicit sketches (< 128 songs) are exact
                    wrong.append(f"{user}|{tag}: {whole.estimate()} songs, truth {len(songs)}")
                if not all(heard_in(doc, s, f, spec) for s in songs):
                    wrong.append(f"{user}|{tag}: a heard song is missing from the filter")
            ledger = ledger_totals(await read_ledger(db, settings.group_id))
            return wrong, len(docs), ledger.events

        return run()

    wrong, ndocs, events = with_db(settings, check)
    assert wrong == []
    assert ndocs == USERS * TAGS
    assert events == 2 * PER_ROUND


def test_sigterm_with_broker_and_store_gone_exits_within_the_bound(tmp_path: Path) -> None:
    """Nothing reachable, data pending: SIGTERM still ends the worker within shutdown_timeout."""
    svc = EmbeddedServices(tmp_path / "svc")
    endpoints = svc.start()
    bound = 8.0
    settings = for_embedded(
        named(
            Settings(
                partitions=2, home=tmp_path, flush_interval=0.5, shutdown_timeout=bound, log_flushes=True
            ),
            "stop",
        ),
        endpoints,
    )
    lines = [(b'{"site":"s","page":"/%d","ts":%d}' % (i % 7, time.time()), b"s") for i in range(600)]
    worker = WorkerProcess(settings, "stopper").start()
    try:
        asyncio.run(produce(settings, lines[:300], 10))
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120))
        svc.stop_store()
        asyncio.run(produce(settings, lines[300:], 10))  # consumed, never committable
        time.sleep(3.0)
        svc.stop()  # the broker too
        began = time.monotonic()
        assert worker.proc is not None
        worker.proc.send_signal(signal.SIGTERM)
        rc = worker.proc.wait(timeout=bound + 30)
        took = time.monotonic() - began
    finally:
        worker.kill()
        svc.stop()
    log = worker.log_path.read_text()
    print(f"\nSIGTERM with broker and store down: exited {rc} after {took:.1f}s (bound {bound:.0f}s)")
    assert took <= bound + 5, log[-3000:]
    assert rc in (0, EXIT_SHUTDOWN_DEADLINE), log[-3000:]
    if rc == EXIT_SHUTDOWN_DEADLINE:
        assert "uncommitted" in log and "hits events" in log, log[-3000:]
