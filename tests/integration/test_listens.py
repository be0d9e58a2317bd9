"""Listens through a real worker: top tags over N days and "heard", against exact truth."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta

import orjson
import pytest

from pipeline.core.hll import EXPLICIT_MAX
from pipeline.core.ids import id_bytes
from pipeline.kafka.producer import EventProducer
from pipeline.kinds.listens import KIND as LISTENS
from pipeline.kinds.listens.layout import listen_fields, listen_id, top_fields
from pipeline.kinds.listens.query import heard, heard_in, top_tags
from pipeline.kinds.listens.summaries import MARKER
from pipeline.settings import Settings
from pipeline.store.meta import META_COLLECTION

from .helpers import run_cli, run_worker_to_end, schema_violations, with_db
from .test_cli import preagg

pytestmark = pytest.mark.integration

TODAY = date(2026, 11, 20)


@pytest.mark.parametrize("schema", ["compact", "readable"])
def test_top_tags_and_heard_against_truth(settings: Settings, schema: str) -> None:
    settings = settings.with_(schema=schema)
    rng = random.Random(6)
    truth: dict[tuple[int, str], dict[date, set[int]]] = defaultdict(lambda: defaultdict(set))
    lines = []
    tags = {"rock": 400, "jazz": 150, "folk": 60, "ambient": 8}
    for tag, songs in tags.items():
        for _ in range(songs * 2):
            day = TODAY - timedelta(days=rng.randrange(10))
            song = rng.randrange(songs)
            ts = datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp()
            truth[(1, tag)][day].add(song)
            lines.append(orjson.dumps({"user": 1, "tag": tag, "song": song, "ts": ts}))
    rng.shuffle(lines)  # late and out of order
    lines.append(b'{"user": 1, "tag": "rock", "song": 1}')  # no ts: dead letter

    async def send() -> None:
        async with EventProducer(settings, settings.topic("listens"), 50) as p:
            for line in lines:
                await p.send_raw(line, id_bytes(1))

    asyncio.run(send())
    run_worker_to_end(settings, topics=[settings.topic("listens")])
    ls = settings.of(LISTENS)
    spec = ls.heard()

    def exact(tag: str, days: int) -> int:
        lo = TODAY - timedelta(days=days - 1)
        return len(set().union(*(s for d, s in truth[(1, tag)].items() if d >= lo)))

    async def check(db):  # type: ignore[no-untyped-def]
        for days in (1, 3, 7):
            got = await top_tags(db, 1, days, today=TODAY, mode=schema)
            want = sorted(tags, key=lambda t: -exact(t, days))
            assert [t for t, _ in got] == [t for t in want if exact(t, days)]
            for tag, est in got:
                n = exact(tag, days)
                assert abs(est - n) <= max(1, 0.05 * n), (tag, days, est, n)
        heard_songs = set().union(*truth[(1, "jazz")].values())
        assert all([await heard(db, 1, "jazz", s, spec, schema) for s in heard_songs])  # no false negatives
        unheard = [s for s in range(1000, 3000)]
        false_pos = sum([await heard(db, 1, "jazz", s, spec, schema) for s in unheard[:300]])
        assert false_pos <= 10
        # The document as a client reads it: past 128 songs its filters answer (none is missed).
        f = listen_fields(schema)
        doc = await db[f["collection"]].find_one({"_id": listen_id(1, "jazz")})
        assert not [s for s in heard_songs if not heard_in(doc, s, f, spec)]
        assert (f["filters"] in (doc or {})) == (len(heard_songs) > EXPLICIT_MAX)
        tops = await db[top_fields(schema)["collection"]].find({}).to_list()
        assert [d["_id"] for d in tops] == ["i1"] and len(tops[0][top_fields(schema)["tags"]]) == len(tags)

    with_db(settings, check)
    out = json.loads(
        preagg(settings, "query", "top-tags", "--user", "1", "--days", "7", "--today", "2026-11-20", "--json")
    )
    assert [r["tag"] for r in out][:2] == ["rock", "jazz"]
    # A window with no listens says where the data is (it printed a bare header).
    env = {**os.environ, **settings.to_env()}
    empty = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline",
            "query",
            "top-tags",
            "--user",
            "1",
            "--days",
            "7",
            "--today",
            "2001-01-07",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert empty.returncode == 0 and "no listens of user 1 in the 7 days up to 2001-01-07" in empty.stderr
    assert "latest listens are of 2026-11-" in empty.stderr, empty.stderr
    assert preagg(
        settings, "query", "heard", "--user", "1", "--tag", "ambient", "--song", "1000"
    ).strip() in ("no", "yes")
    assert not schema_violations(settings)  # what the workers wrote is what schemas/ declares


def test_setup_builds_the_summaries_of_documents_written_before_them(settings: Settings) -> None:
    """Documents of an older preagg have no top-tags summary: workers refuse to start until
    ``preagg setup`` builds them, and what it builds is what a worker would have written."""
    rng = random.Random(9)
    lines = [
        orjson.dumps({"user": u, "tag": f"t{rng.randrange(6)}", "song": rng.randrange(200), "ts": ts})
        for u in (1, 2, 3)
        for ts in (TODAY - timedelta(days=rng.randrange(9)) for _ in range(300))
        for ts in [datetime(ts.year, ts.month, ts.day, 9, tzinfo=UTC).timestamp()]
    ]

    async def send() -> None:
        async with EventProducer(settings, settings.topic("listens"), 50) as p:
            for line in lines:
                await p.send_raw(line, b"")

    asyncio.run(send())
    run_worker_to_end(settings, topics=[settings.topic("listens")])
    tf = top_fields()

    async def forget(db):  # type: ignore[no-untyped-def]
        written = {d["_id"]: d async for d in db[tf["collection"]].find({})}
        before = {u: await top_tags(db, u, 7, today=TODAY) for u in (1, 2, 3)}
        await db[tf["collection"]].delete_many({})
        await db[META_COLLECTION].delete_one({"_id": MARKER})
        assert {u: await top_tags(db, u, 7, today=TODAY) for u in (1, 2, 3)} == before  # read from the slots
        return written, before

    written, before = with_db(settings, forget)
    assert sorted(written) == ["i1", "i2", "i3"]
    manual = settings.with_(auto_setup=False)
    check = run_cli(manual, "setup", "--check")
    assert check.returncode == 1 and "top-tags summaries (listen_tops)" in check.stdout, check.stdout
    built = run_cli(manual, "setup")
    assert built.returncode == 0 and "built the top-tags summaries of 3 users" in built.stdout, built.stdout
    assert run_cli(manual, "setup", "--check").returncode == 0

    async def after(db):  # type: ignore[no-untyped-def]
        rebuilt = {d["_id"]: d async for d in db[tf["collection"]].find({})}
        assert rebuilt == written
        assert {u: await top_tags(db, u, 7, today=TODAY) for u in (1, 2, 3)} == before

    with_db(settings, after)


def test_a_document_found_absent_is_inserted_as_its_upsert_would_create_it(settings: Settings) -> None:
    """The sink inserts read-modify-writes that found no document; the store must hold what
    the upsert would have made (dotted slots as embedded documents, BinData as sent)."""
    from pymongo import MongoClient, UpdateOne

    from pipeline.core.updates import DocUpdate, new_document
    from pipeline.kinds.listens.aggregate import ListenSketches
    from pipeline.kinds.listens.decode import ListenDecoder
    from pipeline.store.statements import update_document

    agg = ListenSketches(ListenDecoder(10**6, 300, clock=lambda: 2e9), 12, settings.of(LISTENS).heard())
    for song in range(200):  # past the explicit form: filters too
        assert agg.ingest(orjson.dumps({"user": 4, "tag": "a.b", "song": song, "ts": 1.7e9})) is None
    assert agg.ingest(orjson.dumps({"user": 4, "tag": 9, "song": 1, "ts": 1.7e9 - 86400})) is None
    resolved = []
    for u in agg.plan():
        assert u.compute is not None
        resolved.append(DocUpdate(u.collection, u.id, u.set_on_insert, set=u.compute(None), key=u.key))
    client: MongoClient[dict[str, object]] = MongoClient(settings.mongo_url, timeoutMS=30_000)
    try:
        db = client[settings.db]
        for u in resolved:
            db["upserted"].bulk_write([UpdateOne(u.filter(), update_document(u), upsert=True)])
            db["inserted"].insert_one(new_document(u))
        assert len(resolved) == 3
        assert list(db["inserted"].find().sort("_id")) == list(db["upserted"].find().sort("_id"))
    finally:
        client.close()
