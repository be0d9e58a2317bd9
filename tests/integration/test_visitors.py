"""Unique visitors end to end: an access log produced, counted by a worker, read by the CLI and the API."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from pipeline.kinds.hits import KIND as HITS
from pipeline.settings import Settings

from .helpers import cli, run_worker_to_end, with_db

pytestmark = pytest.mark.integration

SITE = "shop.example"
BROWSERS = ("Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0", "Mozilla/5.0 (Macintosh) Safari/605.1.15")


def _access_log(
    path: Path, lines: int, addresses: int, seed: int, hours: float = 48
) -> dict[date, dict[str, set[str]]]:
    """A generated access log over the ``hours`` up to today's UTC midnight; per UTC day and page
    (and ``""``: the site), the distinct address + browser pairs of its human hits (crawlers are no
    visitors). Whole days whatever the time the test runs: a window ending now gave the first day
    a sliver of the hits late in the evening (exact where it should be an estimate)."""
    rng = random.Random(seed)
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    truth: dict[date, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    out = []
    for i in range(lines):
        ts = int(end - rng.uniform(0, hours * 3600))
        page = "/" if i % 3 == 0 else f"/p/{rng.randrange(4)}"
        ip = f"10.{rng.randrange(addresses) // 250}.0.{rng.randrange(addresses) % 250}"
        bot = i % 11 == 0
        agent = "Googlebot/2.1 (+http://www.google.com/bot.html)" if bot else rng.choice(BROWSERS)
        when = datetime.fromtimestamp(ts, UTC)
        out.append(f'{ip} - - [{when:%d/%b/%Y:%H:%M:%S +0000}] "GET {page} HTTP/1.1" 200 512 "-" "{agent}"')
        if not bot:
            for key in (page, ""):
                truth[when.date()][key].add(f"{ip} {agent}")
    path.write_text("\n".join(out) + "\n")
    return truth


def _query(s: Settings, *args: str, site: str = SITE) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(cli(s, "query", "visitors", "--site", site, *args, "--json"))
    return rows


def test_visitors_of_an_access_log_are_its_distinct_address_and_browser_pairs(
    settings: Settings, tmp_path: Path
) -> None:
    """Small sets are exact (the explicit form), the site's busy day an estimate within 5%, bots
    never visitors, and the raw addresses stored nowhere."""
    log = tmp_path / "access.log"
    truth = _access_log(log, 6_000, addresses=3_000, seed=3)
    s = settings.with_stream(HITS, site=SITE)
    out = cli(s, "produce", "hits", str(log), "--format", "clf", "--site", SITE)
    assert "sent 6000 events" in out, out
    run_worker_to_end(s, "visitors", timeout=240)

    days = sorted(truth)
    first, last = days[0].isoformat(), days[-1].isoformat()
    # A page's day: at most a few hundred visitors, some pages under the explicit bound.
    for page in ("/p/0", "/p/3"):
        rows = _query(s, "--page", page, "--from", first, "--to", last, "--by", "day")
        got = {r["t"][:10]: r for r in rows}
        for day in days:
            want = len(truth[day][page])
            row = got[day.isoformat()]
            if row["exact"]:
                assert row["visitors"] == want, (page, day, row, want)
            else:
                assert abs(row["visitors"] - want) <= 0.05 * want, (page, day, row, want)
    # The site: thousands of visitors a day, an estimate (0.81% standard error).
    rows = _query(s, "--from", first, "--to", last, "--by", "day")
    for r in rows:
        want = len(truth[date.fromisoformat(r["t"][:10])][""])
        assert want > 128 and r["exact"] is False
        assert abs(r["visitors"] - want) <= 0.05 * want, (r, want)
    # The range's total: with the daily salt, the sum of its days' visitors (about).
    total = _query(s, "--from", first, "--to", last, "--by", "total")
    assert len(total) == 1 and total[0]["sum_of_days"] is True  # labelled: not distinct people
    summed = sum(len(truth[d][""]) for d in days)
    assert abs(total[0]["visitors"] - summed) <= 0.05 * summed, (total, summed)

    # Nothing stored holds a client address in clear.
    async def stored(db):  # type: ignore[no-untyped-def]
        return [d async for d in db["hits_daily"].find({}, {"_id": 0})]

    docs = with_db(s, stored)

    def text(v: object) -> str:  # binary values (hashes, registers) as hex: no stray "10."
        return v.hex() if isinstance(v, bytes) else str(v)

    assert docs and not any("10." in json.dumps(d, default=text) for d in docs)


def test_a_page_with_few_visitors_is_exact_over_any_range(settings: Settings, tmp_path: Path) -> None:
    """Under the explicit bound a range's visitors are exact; with a fixed salt, one person over two
    days counts once."""
    log = tmp_path / "access.log"
    truth = _access_log(log, 400, addresses=40, seed=8)
    s = settings.with_stream(HITS, site=SITE, visitor_salt="fixed")
    cli(s, "produce", "hits", str(log), "--format", "clf", "--site", SITE)
    run_worker_to_end(s, "visitors-fixed", timeout=240)
    days = sorted(truth)
    everyone = set().union(*(truth[d][""] for d in days))
    total = _query(s, "--from", days[0].isoformat(), "--to", days[-1].isoformat(), "--by", "total")
    want = {
        "t": f"{days[0].isoformat()}T00:00:00",
        "visitors": len(everyone),
        "exact": True,
        "hits": 400,
        "sum_of_days": False,  # the fixed salt: each person once over the range
    }
    assert total == [want]
    yesterday = (datetime.now(UTC).date() - timedelta(days=1)).isoformat()
    hours = _query(s, "--from", yesterday, "--to", yesterday, "--by", "hour")
    assert len(hours) == 24 and all(r["exact"] for r in hours)
    assert max(int(str(r["visitors"])) for r in hours) > 0


def test_rebuilt_rollups_count_the_visitors_the_workers_counted(settings: Settings, tmp_path: Path) -> None:
    """``preagg rollups rebuild`` makes a site's sketches the union of its pages' (a sketch is no
    counter: summed, a rebuilt site read 0 visitors). From rollups and their registers deleted,
    as before rollups existed: a busy site (registers) and a small one (exact) read by day, by
    hour and over the range exactly what the workers' rollups gave."""
    from pipeline.kinds.hits.layout import hits_fields, register_fields

    small = "small.example"
    truth = _access_log(tmp_path / "big.log", 3_000, addresses=2_000, seed=5)
    _access_log(tmp_path / "small.log", 300, addresses=30, seed=6)
    s = settings.with_stream(HITS, site=SITE)
    cli(s, "produce", "hits", str(tmp_path / "big.log"), "--format", "clf", "--site", SITE)
    cli(s, "produce", "hits", str(tmp_path / "small.log"), "--format", "clf", "--site", small)
    run_worker_to_end(s, "visitors-rebuild", timeout=240)
    days = sorted(truth)
    span = ("--from", days[0].isoformat(), "--to", days[-1].isoformat())

    def answers() -> dict[str, list[dict[str, object]]]:
        return {
            f"{site} {by}": _query(s, *span, "--by", by, site=site)
            for site in (SITE, small)
            for by in ("hour", "day", "total")
        }

    before = answers()
    assert before[f"{SITE} day"] and not any(r["exact"] for r in before[f"{SITE} day"])
    assert all(r["exact"] for r in before[f"{small} day"]) and before[f"{small} total"][0]["visitors"]
    f = hits_fields(s.schema).rollups
    rollups = (f.daily.collection, f.monthly.collection, f.top_daily.collection, f.top_monthly.collection)

    async def forget(db):  # type: ignore[no-untyped-def]
        for c in rollups:
            await db[c].delete_many({})
        for c in rollups[:2]:
            await db[register_fields(s.schema).collection].delete_many({"_id": {"$regex": f"^{c}\\|"}})

    with_db(s, forget)
    assert _query(s, *span, "--by", "total")[0]["visitors"] == 0
    for site in (SITE, small):
        out = cli(s, "rollups", "rebuild", "--site", site, "--from", days[0].isoformat())
        assert "rebuilt" in out, out
    assert answers() == before


def test_retention_deletes_the_registers_of_the_hours_it_prunes(settings: Settings, tmp_path: Path) -> None:
    """Pruning hourly sketches (``preagg retention run``) deletes their register documents too (they
    lived on, unread, for good); the days' sketches and registers stay and read as before."""
    from pipeline.kinds.hits.layout import hits_fields, register_fields

    truth = _access_log(tmp_path / "busy.log", 2_000, addresses=1_500, seed=9, hours=3)
    s = settings.with_stream(HITS, site=SITE, visitors_fold_after=0.0)  # the site days' registers stay
    cli(s, "produce", "hits", str(tmp_path / "busy.log"), "--format", "clf", "--site", SITE)
    run_worker_to_end(s, "visitors-retention", timeout=240)
    days = sorted(truth)
    span = ("--from", days[0].isoformat(), "--to", days[-1].isoformat())
    f = hits_fields(s.schema)
    pages, site_days, hourly = f.daily.collection, f.rollups.daily.collection, f.daily.hourly_visitors

    def registers(holder: str) -> dict[str, int]:
        async def count(db):  # type: ignore[no-untyped-def]
            regs = db[register_fields(s.schema).collection]
            return {
                c: await regs.count_documents({"_id": {"$regex": f"^{c}\\|{holder}"}})
                for c in (pages, site_days)
            }

        return dict(with_db(s, count))

    hours_before, days_before = registers(f"{hourly}\\."), registers(f"{f.daily.visitors}\\|")
    # the site days keep their partitions' registers in their rollups (``b``), pages apart
    assert all(hours_before.values()) and days_before[pages] and not days_before[site_days], (
        hours_before,
        days_before,
    )
    # the partitions' registers in one document per holder (a field each, read, maxed, set)
    assert registers(f"{hourly}\\.[0-9]+\\|-2\\|") == hours_before
    before = _query(s, *span, "--by", "day")
    later = (days[-1] + timedelta(days=401)).isoformat()  # past the hourly tier (400 days)
    dry = cli(s, "retention", "run", "--dry-run", "--today", later)
    assert f"{hours_before[pages]} register documents" in dry, dry
    out = cli(s, "retention", "run", "--settle", "0", "--today", later)
    assert "register documents" in out, out
    assert registers(f"{hourly}\\.") == {pages: 0, site_days: 0}
    # the days' registers stay; the site's past days are folded into their rollups
    assert registers(f"{f.daily.visitors}\\|") == {pages: days_before[pages], site_days: 0}
    assert "folded the visitor registers of" in out, out
    assert _query(s, *span, "--by", "day") == before


def test_a_settled_site_day_is_one_document_to_read(settings: Settings, tmp_path: Path) -> None:
    """A site's day keeps its partitions' visitor registers in its rollup: a chart reads one document
    a day, the day being written too. Once settled they are folded into one register set, and
    the answers stay. ``preagg retention run`` folds what a worker left; a
    write after the fold lists its registers again and is counted; a worker folds by itself."""
    from pipeline.core.uniques import INLINE
    from pipeline.kinds.hits.layout import hits_fields, register_fields
    from pipeline.kinds.hits.registers import register_ids
    from pipeline.kinds.hits.sites.fold import unfolded
    from pipeline.worker.process import WorkerProcess

    from .helpers import wait_caught_up

    truth = _access_log(tmp_path / "busy.log", 3_000, addresses=2_000, seed=21)
    off = settings.with_stream(HITS, site=SITE, visitors_fold_after=0.0)
    cli(off, "produce", "hits", str(tmp_path / "busy.log"), "--format", "clf", "--site", SITE)
    run_worker_to_end(off, "fold-off", timeout=240)
    days = sorted(truth)
    span = ("--from", days[0].isoformat(), "--to", days[-1].isoformat())
    f = hits_fields(off.schema).rollups

    def site_days() -> tuple[int, list[list[str]], int]:
        """The site days' register documents, what each day's rollup sends a reader to read, and
        the rollups holding their partitions' registers in themselves (``b``)."""

        async def read(db):  # type: ignore[no-untyped-def]
            regs = db[register_fields(off.schema).collection]
            n = await regs.count_documents(
                {"_id": {"$regex": f"^{f.daily.collection}\\|{f.daily.visitors}\\|"}}
            )
            docs = [d async for d in db[f.daily.collection].find({}, {f.daily.visitors: 1})]
            return (
                n,
                [
                    register_ids(f.daily.collection, d["_id"], f.daily.visitors, d.get(f.daily.visitors))
                    for d in docs
                ],
                sum(INLINE in (d.get(f.daily.visitors) or {}) for d in docs),
            )

        n, ids, inline = with_db(off, read)
        return int(n), list(ids), int(inline)

    # Written, not folded: one document a day already (the partitions' registers in the rollup).
    n, ids, inline = site_days()
    assert (n, ids) == (0, [[] for _ in ids]) and inline == len(ids) == len(days), (n, ids, inline)
    assert with_db(off, lambda db: unfolded(db, hits_fields(off.schema)))
    before = {by: _query(off, *span, "--by", by) for by in ("day", "total")}
    assert not any(r["exact"] for r in before["day"])
    later = (days[-1] + timedelta(days=2)).isoformat()
    out = cli(off, "retention", "run", "--settle", "0", "--today", later)
    assert "folded the visitor registers of" in out, out
    assert site_days() == (0, [[] for _ in ids], 0)  # one register set a day, in ``f``
    left = with_db(off, lambda db: unfolded(db, hits_fields(off.schema)))
    assert all(len(i.split("/")[0]) == 6 for i in left), left  # a month not over waits its end
    assert {by: _query(off, *span, "--by", by) for by in ("day", "total")} == before

    # New visitors on the last day, after its fold: in ``b`` again, counted; this worker folds them.
    more = _access_log(tmp_path / "more.log", 1_500, addresses=1_000, seed=22, hours=1)
    cli(off, "produce", "hits", str(tmp_path / "more.log"), "--format", "clf", "--site", SITE)
    on = off.with_stream(HITS, visitors_fold_after=1.0)
    w = WorkerProcess(on, "fold-on").start()
    try:
        asyncio.run(wait_caught_up(on, [on.topic("hits")], timeout=240))
        deadline = time.monotonic() + 180
        while left := with_db(on, lambda db: unfolded(db, hits_fields(on.schema))):
            assert time.monotonic() < deadline, f"never folded: {left}"
            time.sleep(0.5)
    finally:
        assert w.terminate() == 0, w.log_path.read_text()[-3000:]
    assert site_days()[0] == 0
    for r in _query(off, *span, "--by", "day"):
        day = date.fromisoformat(str(r["t"])[:10])
        want = len(truth[day][""] | more.get(day, {}).get("", set()))
        assert abs(int(str(r["visitors"])) - want) <= 0.05 * want, (r, want)


def test_a_fold_that_meets_a_flush_loses_no_register(settings: Settings) -> None:
    """A flush writing between a fold's reads and its writes (a partition's registers maxed and set,
    in a document of their own or as its field of the partitions' document,
    its holder listing a partition, or a partition's registers set in the holder): the fold does
    not apply (a write conflict, or a condition unmet), the answer holds the flush's visitors;
    tried again, it folds them all."""
    from bson import Binary
    from pymongo.errors import PyMongoError

    from pipeline.core.uniques import PARTS, estimate, merged_blob, register_ranks_of
    from pipeline.kinds.hits.layout import hits_fields, register_fields, register_id
    from pipeline.kinds.hits.registers import read_registers, register_ids
    from pipeline.kinds.hits.sites.fold import fold_holder

    f, rf = hits_fields(settings.schema), register_fields(settings.schema)
    c, v = f.rollups.daily.collection, f.rollups.daily.visitors
    rng = random.Random(31)
    a, b = [rng.getrandbits(64) for _ in range(2_000)], [rng.getrandbits(64) for _ in range(1_000)]
    truth = len(set(a) | set(b))

    async def scenario(db, what: str):  # type: ignore[no-untyped-def]
        doc_id = f"20260101/{what}.test"
        mine, other = register_id(c, doc_id, v, 0), register_id(c, doc_id, v, 1)
        await db[c].insert_one({"_id": doc_id, v: {"o": True, "w": [0]}})
        await db[rf.collection].insert_one(
            {"_id": mine, rf.blob: Binary(merged_blob(None, register_ranks_of(a)))}
        )

        if what == "parts":  # the partitions' register document, partition 0's field in it
            mine = register_id(c, doc_id, v, PARTS)
            await db[rf.collection].delete_many({"_id": {"$regex": f"^{c}\\|{v}\\|[01]\\|"}})
            await db[c].update_one({"_id": doc_id}, {"$set": {f"{v}.w": [PARTS]}})
            await db[rf.collection].insert_one(
                {"_id": mine, rf.parts: {"0": Binary(merged_blob(None, register_ranks_of(a)))}}
            )
        if what == "inline":  # the partitions' registers in the holder itself
            await db[c].update_one(
                {"_id": doc_id},
                {"$set": {v: {"o": True, "b": {"0": Binary(merged_blob(None, register_ranks_of(a)))}}}},
            )
            await db[rf.collection].delete_one({"_id": mine})

        async def flush_meanwhile() -> None:
            if what == "inline":  # partition 1's flush: its counters and registers in the rollup
                blob = merged_blob(None, register_ranks_of(b))
                await db[c].update_one(
                    {"_id": doc_id}, {"$inc": {"n": 1}, "$set": {f"{v}.b.1": Binary(blob)}}
                )
            elif what == "parts":  # partition 1's flush: its field of the partitions' document
                blob = merged_blob(None, register_ranks_of(b))
                await db[rf.collection].update_one({"_id": mine}, {"$set": {f"{rf.parts}.1": Binary(blob)}})
            elif what == "registers":  # partition 0's next flush: read, maxed, set
                stored = await db[rf.collection].find_one({"_id": mine})
                blob = merged_blob(bytes(stored[rf.blob]), register_ranks_of(b))
                await db[rf.collection].update_one({"_id": mine}, {"$set": {rf.blob: Binary(blob)}})
            else:  # partition 1's first flush: its document, then its listing
                blob = merged_blob(None, register_ranks_of(b))
                await db[rf.collection].insert_one({"_id": other, rf.blob: Binary(blob)})
                await db[c].update_one({"_id": doc_id}, {"$addToSet": {f"{v}.w": 1}})

        async def answer() -> int:
            holder = (await db[c].find_one({"_id": doc_id}))[v]
            found = await read_registers(db, rf, register_ids(c, doc_id, v, holder))
            return estimate([holder], found.values()).value

        try:
            first: str = await fold_holder(db, c, doc_id, {}, v, f, after_read=flush_meanwhile)
        except PyMongoError as exc:  # a write conflict: the workers' loop tries again later
            first = type(exc).__name__
        mid = await answer()
        second = await fold_holder(db, c, doc_id, {}, v, f)
        left = await db[rf.collection].count_documents({"_id": {"$in": [mine, other]}})
        return first, mid, second, await answer(), left

    for what in ("registers", "listing", "inline", "parts"):
        first, mid, second, after, left = with_db(settings, lambda db, w=what: scenario(db, w))
        assert first != "folded", (what, first)
        assert abs(mid - truth) <= 0.03 * truth, (what, mid, truth)
        assert (second, after, left) == ("folded", mid, 0), (what, second, after, left)


def test_two_workers_creating_the_secret_at_once_share_one(settings: Settings) -> None:
    """Both find no secret and insert one: the second insert meets E11000 (someone inserted that
    `_id`), so it reads the one that won instead; both then hash alike."""
    import asyncio

    from pipeline.kinds.hits.salt import VisitorKeys
    from pipeline.store.client import mongo_client

    async def race() -> tuple[bytes, bytes]:
        clients = [mongo_client(settings.mongo_url or "") for _ in range(2)]
        try:
            keys = [VisitorKeys(c[settings.db]) for c in clients]
            await asyncio.gather(*(k.load() for k in keys))
            day = datetime.now(UTC).date()
            return keys[0].key(day), keys[1].key(day)
        finally:
            for c in clients:
                await c.close()

    first, second = asyncio.run(race())
    assert first == second
