"""Exactly-once through the fault layer: real workers and the real driver, a proxy that answers as a
real MongoDB does when other writers and the network get in the way.

Every test ends with an audit of every stored counter against the truth.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from pipeline.core.commit import Fence
from pipeline.core.ids import id_bytes
from pipeline.core.updates import DocUpdate, merge_sources
from pipeline.kafka.producer import EventProducer
from pipeline.kinds import named
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.impressions.query import items_of_user
from pipeline.kinds.listens.query import top_tags
from pipeline.kinds.relations import KIND as RELATIONS
from pipeline.kinds.relations.layout import relation_sides
from pipeline.kinds.relations.query import related_items
from pipeline.ops.lag import wait_caught_up
from pipeline.ops.ledger import ledger_totals, read_ledger
from pipeline.services.embedded import Endpoints, free_port
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.store.sink import MongoSink
from pipeline.testing.mongofault import FaultRates, MongoFaultProxy
from pipeline.testing.simulate import draw_rates, run_schedule
from pipeline.testing.traffic import Traffic, generate
from pipeline.worker.process import WorkerProcess

from .helpers import audit_traffic, cli, produce, run_worker_to_end, with_db

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy(services: Endpoints) -> Iterator[MongoFaultProxy]:
    p = MongoFaultProxy(services.mongo_url, FaultRates(), seed=37).start()
    try:
        yield p
    finally:
        p.stop()


audit = audit_traffic


def run_workers(settings: Settings, names: list[str], timeout: float = 240) -> list[str]:
    """Start workers on ``settings``, wait until the group has counted everything, stop them; their logs."""
    workers = [WorkerProcess(settings, name).start() for name in names]
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=timeout))
    finally:
        codes = [w.terminate() for w in workers]
    logs = [w.log_path.read_text() for w in workers]
    assert all(c in (0, 75) for c in codes), (codes, [log[-2000:] for log in logs])
    return logs


def test_rival_inserts_of_new_documents_are_sent_again_not_taken_as_applied(
    settings: Settings, proxy: MongoFaultProxy
) -> None:
    """Half the new documents' upserts lose the insert race to another writer (E11000).

    Keyless messages, so most documents are one upsert merged from several partitions. Before
    the fix every such E11000 counted as "already applied": thousands of cells were lost.
    """
    settings = settings.with_(partitions=4, max_pending_keys=1_500)
    traffic = generate(4_000, end=time.time(), days=1, seed=37, bad_share=0.0)
    asyncio.run(produce(settings, [(line, None) for line, _ in traffic.lines], pack=1))
    proxy.set_rates(FaultRates(rival_insert=0.5))
    logs = run_workers(settings.with_(mongo_url=proxy.url), ["racer-a", "racer-b"])
    assert proxy.injected["rival_insert"] > 50, proxy.injected
    problems, events = audit(settings, traffic)
    assert problems == [], problems[:10]
    assert events == len(traffic.lines)
    assert any("met another writer's insert and were sent again" in log for log in logs)
    # Idempotent writes and ledger moves wait for a majority whatever the URL says (item 8).
    data = {
        k: n
        for k, n in proxy.writes_by_concern.items()
        if k[1] != "commitTransaction" and k[2] != "preagg_meta"  # the setup's probe and markers
    }
    assert {w for w, _, _ in data} == {"majority"}, data


def test_a_merged_upsert_whose_partition_was_redone_apart_still_writes_the_other_shares(
    settings: Settings,
) -> None:
    """The old owner's flush is still writing when the new owner redid one partition.

    The document then holds partition 0's mark; the merged upsert of partitions 0 and 1 matches
    nothing and its insert fails on ``_id``. Before the fix the whole statement counted as
    applied and partition 1's share was lost.
    """

    async def run() -> dict[str, Any]:
        client = mongo_client(settings.mongo_url or "", timeout=20)
        try:
            old = MongoSink(client, settings.db, settings.group_id, "old-owner")
            new = MongoSink(client, settings.db, settings.group_id, "new-owner")
            p0 = DocUpdate("counts", "doc", {"site": "s"}, {"n": 2, "a": 2}, sources=(("hits", 0),))
            p1 = DocUpdate("counts", "doc", {"site": "s"}, {"n": 3, "b": 3}, sources=(("hits", 1),))
            (merged,) = merge_sources([p0, p1])
            fences = [Fence("hits", 0, None, 10, begin=0), Fence("hits", 1, None, 7, begin=0)]
            seqs, done = await old.idempotent._intent(fences, "F")  # the old owner's flush starts...
            assert not done
            # ...and loses partition 0, whose new owner finds the intent and writes its range alone.
            assert not (await new.commit([p0], fences[:1], "F", marked=True)).already
            await old.idempotent._marked_writes([merged], seqs)  # the old owner's writes go on
            await old.idempotent._finish(fences, "F")
            assert old.split_shares == 1  # partition 1's share sent apart, partition 0's left out
            # Written again whole (a retry): nothing more, and seen as applied.
            await old.idempotent._marked_writes([merged], seqs)
            assert old.already_applied == 1
            doc = await client[settings.db]["counts"].find_one({"_id": "doc"})
            assert doc is not None
            return doc
        finally:
            await client.close()

    doc = asyncio.run(run())
    assert (doc["n"], doc["a"], doc["b"], doc["site"]) == (5, 2, 3, "s")


def test_answers_lost_and_bulks_cut_by_a_step_down_count_nothing_twice(
    settings: Settings, proxy: MongoFaultProxy
) -> None:
    """A fifth of the writes (upserts, intents, ledger moves) apply and lose their answer: the
    driver retries once, and when that answer is lost too the flush is retried, idempotently. A
    twentieth of the bulk writes (and always the first) apply their first half only and answer a
    step-down error."""
    settings = settings.with_(partitions=4, max_pending_keys=1_000)
    traffic = generate(3_000, end=time.time(), days=1, seed=38, bad_share=0.0)
    asyncio.run(produce(settings, traffic.lines, pack=1))
    rates = FaultRates(
        lost_reply=0.2,
        rival_insert=0.2,
        partial_bulk=0.05,
        first_partial_bulks=1,
        first_lost_replies=6,
        slow=0.02,
    )
    proxy.set_rates(rates)
    run_workers(settings.with_(mongo_url=proxy.url), ["lossy-a", "lossy-b"])
    assert proxy.injected["lost_reply"] > 5 and proxy.injected["partial_bulk"] > 0, proxy.injected
    problems, events = audit(settings, traffic)
    assert problems == [], problems[:10]
    assert events == len(traffic.lines)


def test_unique_visitors_through_lost_answers_rival_inserts_and_step_downs(
    settings: Settings, proxy: MongoFaultProxy
) -> None:
    """Keyless hits naming their visitors, two workers, the faults above: a partition's registers
    are read, maxed and set under its marks, so a write applied twice, cut short or raced adds
    nothing and loses nothing. Every site's day is within 5% of its distinct visitors, exact
    where it says so, and the counters audit clean."""
    settings = settings.with_(partitions=4, max_pending_keys=1_000)
    traffic = generate(3_000, end=time.time(), days=1, seed=39, bad_share=0.0, visitors=1_200)
    asyncio.run(produce(settings, [(line, None) for line, _ in traffic.lines], pack=1))
    proxy.set_rates(FaultRates(lost_reply=0.2, rival_insert=0.3, partial_bulk=0.05, first_partial_bulks=1))
    run_workers(settings.with_(mongo_url=proxy.url), ["sketch-a", "sketch-b"])
    assert proxy.injected["lost_reply"] > 5 and proxy.injected["rival_insert"] > 5, proxy.injected
    problems, events = audit(settings, traffic)
    assert problems == [], problems[:10]
    assert events == len(traffic.lines)
    estimated = 0
    for (site, day), people in traffic.visitors.items():
        out = cli(
            settings, "query", "visitors", "--site", site, "--from", str(day), "--to", str(day), "--json"
        )
        (row,) = json.loads(out)
        if row["exact"]:
            assert row["visitors"] == len(people), (site, day, row)
        else:
            estimated += 1
            assert abs(row["visitors"] - len(people)) <= 0.05 * len(people), (site, day, row, len(people))
    assert estimated, "no site's day past the explicit bound: the registers were not exercised"


def test_seeded_fault_schedules_stay_exact(settings: Settings) -> None:
    """The bounded run of `make simulate`: two schedules of kills, crashes at commit points, rival
    inserts and lost answers over all four kinds, and the deployment's boundaries (a lagging shard
    rolled back by a failover, a mongos behind a direct connection, ledgers deleted or restored
    older than their documents, a paused lease holder), both with the visits stage; every counter
    and every visit figure exact, every event counted once, no intent left."""
    settings = settings.with_(partitions=4, max_pending_keys=2_000)
    lines: list[str] = []
    seen: Counter[str] = Counter()
    lossy = [s for s in range(1, 50) if draw_rates(s).rival_insert and draw_rates(s).lost_reply]
    seeds = [next(s for s in lossy if s % 2 == 1), next(s for s in lossy if s % 2 == 0)]
    for seed in seeds:
        run = named(settings, f"s{seed}-{settings.group_id[-8:]}")
        # Both with the visits stage: the odd one's lagging shard, rollback and records let go of
        # meet its writes too.
        report = run_schedule(run, seed, 4_000, 8.0, lines.append, other_events=1_000, visits=True)
        assert report.mismatches == [], (report.mismatches, lines)
        seen.update(report.faults)
    assert seen["rival_insert"] > 0 and seen["lost_reply"] > 0 and seen["kill -9"] > 0, (seen, lines)
    assert seen["write_concern_error"] > 0 and seen["rolled_back"] > 0, (seen, lines)
    assert seen["paused lease holder"] > 0 and any(k.startswith("ledger ") for k in seen), (seen, lines)
    assert any(k.startswith("a memory bound") for k in seen), (seen, lines)


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:  # not listening yet
        return 0, {}


def test_a_write_that_fails_for_good_is_escalated_and_goes_through_once_fixed(settings: Settings) -> None:
    """A manual edit made a counter a string; $inc then fails with TypeMismatch
    on every attempt. After a bounded number of attempts /health/ready fails (liveness does not:
    a restart fixes no document) and `preagg status` names the problem; fixed, the same flush
    goes through by itself, exactly."""
    traffic = generate(600, end=time.time(), days=1, seed=41, bad_share=0.0)
    asyncio.run(produce(settings, traffic.lines, pack=10))
    run_worker_to_end(settings)
    daily = hits_fields().daily

    async def break_one(db):  # type: ignore[no-untyped-def]
        doc = await db[daily.collection].find_one({daily.total: {"$gt": 0}})
        await db[daily.collection].update_one({"_id": doc["_id"]}, {"$set": {daily.total: "edited by hand"}})
        return doc["_id"], doc[daily.total]

    broken, total = with_db(settings, break_one)
    asyncio.run(produce(settings, traffic.lines, pack=10))  # the same pages again: that document too
    web = free_port()
    w = WorkerProcess(settings.with_(web_port=web), "stuck").start()
    try:
        deadline = time.monotonic() + 180
        status, ready = get_json(f"http://127.0.0.1:{web}/health/ready")
        while "stuck" not in ready and time.monotonic() < deadline:
            time.sleep(0.5)
            status, ready = get_json(f"http://127.0.0.1:{web}/health/ready")
        assert status == 503 and "TypeMismatch" in ready["stuck"]["hits"], ready
        status, live = get_json(f"http://127.0.0.1:{web}/health/live")
        assert status == 200 and "TypeMismatch" in live["stuck"]["hits"], live
        shown = cli(settings, "status", "--interval", "0")
        assert "PROBLEM" in shown and "cannot write its flush" in shown and "TypeMismatch" in shown, shown

        async def fix(db):  # type: ignore[no-untyped-def]
            await db[daily.collection].update_one({"_id": broken}, {"$set": {daily.total: total}})

        with_db(settings, fix)
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=180))
        status, live = get_json(f"http://127.0.0.1:{web}/health/live")
        while "stuck" in live and time.monotonic() < deadline:
            time.sleep(0.5)
            status, live = get_json(f"http://127.0.0.1:{web}/health/live")
        assert status == 200 and "stuck" not in live, live
    finally:
        assert w.terminate() == 0, w.log_path.read_text()[-3000:]
    assert "fails for good" in w.log_path.read_text()
    twice = Traffic(per_minute=Counter({k: 2 * n for k, n in traffic.per_minute.items()}))
    problems, events = audit(settings, twice)
    assert problems == [], problems[:10]
    assert events == 2 * len(traffic.lines)
    assert "PROBLEM" not in cli(settings, "status", "--interval", "0")


def test_transactions_meet_write_conflicts_and_unknown_commit_outcomes_exactly(
    settings: Settings, proxy: MongoFaultProxy
) -> None:
    """Listens commit in transactions. A fifth of their statements meet WriteConflict, a fifth of
    their commits answer UnknownTransactionCommitResult (half after the server committed): every
    listen is counted once in the ledgers and the sketches answer as without faults."""
    settings = settings.with_(partitions=3, commit_max_docs=16)  # many small transactions
    rng = random.Random(37)
    truth: dict[tuple[int, str], set[int]] = defaultdict(set)
    lines = []
    day = datetime(2026, 11, 20, 12, tzinfo=UTC)
    for _ in range(800):
        user, tag, song = rng.randrange(10), rng.choice(["rock", "jazz", "folk"]), rng.randrange(40)
        truth[(user, tag)].add(song)
        lines.append((orjson.dumps({"user": user, "tag": tag, "song": song, "ts": day.timestamp()}), user))

    async def send() -> None:
        async with EventProducer(settings, settings.topic("listens"), 1) as p:
            for line, user in lines:
                await p.send_raw(line, id_bytes(user))

    asyncio.run(send())
    proxy.set_rates(FaultRates(write_conflict=0.1, commit_unknown=0.3, slow=0.02))
    through = settings.with_(mongo_url=proxy.url, kinds=("listens",))
    workers = [WorkerProcess(through, n).start() for n in ("tx-a", "tx-b")]
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("listens")], timeout=240))
    finally:
        codes = [w.terminate() for w in workers]
    assert all(c in (0, 75) for c in codes), codes
    injected = proxy.injected
    assert injected["write_conflict"] and injected["commit_unknown_applied"], injected
    assert injected["commit_unknown_not_applied"] > 0, injected
    # Every write of documents and ledgers waits for a majority; the setup's
    # markers in preagg_meta and its probe of transactions are not a flush's.
    flushes = {k: n for k, n in proxy.writes_by_concern.items() if k[1] != "commitTransaction"}
    assert {w for (w, _, coll) in flushes if coll != "preagg_meta"} <= {"majority"}, flushes
    commits = {w: n for (w, cmd, _), n in proxy.writes_by_concern.items() if cmd == "commitTransaction"}
    assert commits.get("majority", 0) > commits.get("default", 0), commits

    async def check(db):  # type: ignore[no-untyped-def]
        events = ledger_totals(await read_ledger(db, settings.group_id, [settings.topic("listens")])).events
        wrong = []
        for user in range(10):
            got = dict(await top_tags(db, user, 1, today=day.date(), mode=settings.schema))
            want = {tag: len(s) for (u, tag), s in truth.items() if u == user}
            if got != want:
                wrong.append((user, got, want))
        return events, wrong

    events, wrong = with_db(settings, check)
    assert events == len(lines)
    assert wrong == []


def test_impressions_and_relations_stay_exact_through_the_faults(
    settings: Settings, proxy: MongoFaultProxy
) -> None:
    """The other idempotent kinds, keyless: impression counts exact, Bloom relations without a
    false negative, every event counted once, through rival inserts, lost answers and step-downs."""
    settings = settings.with_(partitions=3, kinds=("impressions", "relations"))
    rng = random.Random(42)
    truth: Counter[tuple[int, int]] = Counter()
    related: set[tuple[int, int]] = set()
    impressions, relations = [], []
    for _ in range(2_000):
        user, item = rng.randrange(30), rng.randrange(25)
        truth[(user, item)] += 1
        ts = 1_700_000_000 + rng.randrange(86400)
        impressions.append(orjson.dumps({"user": user, "item": item, "ts": ts}))
        if rng.random() < 0.3:
            related.add((user, item))
            relations.append(orjson.dumps({"user": user, "item": item}))

    async def send() -> None:
        for kind, lines in (("impressions", impressions), ("relations", relations)):
            topic = settings.topic(kind)
            async with EventProducer(settings, topic, 1) as p:
                for line in lines:
                    await p.send_raw(line, None)

    asyncio.run(send())
    proxy.set_rates(FaultRates(rival_insert=0.3, lost_reply=0.1, partial_bulk=0.05))
    topics = [settings.topic("impressions"), settings.topic("relations")]
    through = settings.with_(mongo_url=proxy.url)
    workers = [WorkerProcess(through, n).start() for n in ("ir-a", "ir-b")]
    try:
        asyncio.run(wait_caught_up(settings, topics, timeout=240))
    finally:
        codes = [w.terminate() for w in workers]
    assert all(c in (0, 75) for c in codes), codes
    assert proxy.injected["rival_insert"] > 0, proxy.injected
    r = settings.of(RELATIONS)
    sides = relation_sides(r.user_capacity, r.item_capacity, r.fpr)

    async def check(db):  # type: ignore[no-untyped-def]
        events = ledger_totals(await read_ledger(db, settings.group_id)).events
        wrong = []
        for user in range(30):
            got = dict(await items_of_user(db, user, mode=settings.schema))
            want = {i: n for (u, i), n in truth.items() if u == user}
            if got != want:
                wrong.append((user, got, want))
        missed = []
        for u in range(30):
            got_items = set(await related_items(db, u, sides))
            missed += [(u, i) for uu, i in related if uu == u and i not in got_items]
        return events, wrong, missed

    events, wrong, missed = with_db(settings, check)
    assert events == len(impressions) + len(relations)
    assert wrong == [] and missed == []
