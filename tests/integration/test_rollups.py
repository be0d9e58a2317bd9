"""Site rollups end to end: written by the worker, read by every site chart, rebuilt by the CLI.

- the rollups equal the sum of the page documents (one site in a DST zone, late
  events, a retention run), and the audit of every document against the truth is exact;
- with the page collections renamed away, every site chart (the query functions, the
  HTTP API, Grafana) still answers the truth: none of them reads a page document;
- ``preagg rollups rebuild`` twice from the page documents gives the same rollups;
- the page cap and the query-string policy bound the page documents, site totals exact.
"""

from __future__ import annotations

import asyncio
import csv
import io
import re
import shlex
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.marks import MARKS
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query import hits_series, top_pages
from pipeline.kinds.hits.query_props import prop_counts
from pipeline.ops.lag import wait_caught_up
from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings
from pipeline.testing.audit import audit_hits, audit_rollups
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

from .helpers import cli, produce, run_worker_to_end, with_db
from .test_serve import call, q

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "rollups.md"
END = datetime(2026, 3, 30, 6, tzinfo=UTC)  # the last Sunday of March: Berlin's DST starts


async def rename(db: Any, collections: list[str], suffix_from: str, suffix_to: str) -> None:
    for c in collections:
        await db[c + suffix_from].rename(c + suffix_to)


def test_rollups_are_the_sum_of_pages_and_site_charts_read_only_them(settings: Settings) -> None:
    f = hits_fields(settings.schema)
    traffic = generate(4000, end=END.timestamp(), days=3, seed=24, props=True)
    truth = traffic.per_minute
    # the UTC sites first: the audit plans the truth in UTC
    asyncio.run(produce(settings, traffic.lines, pack=20))
    run_worker_to_end(settings)
    problems = with_db(settings, lambda db: audit_hits(db, truth, f, limit=10**6))
    assert [p for p in problems if f" {f.daily.props}." not in p] == []  # the truth has no properties
    assert with_db(settings, lambda db: audit_rollups(db, f)) == []

    # a site in a DST zone, and a retention run over it: rollups still the pages' sums
    cli(settings, "sites", "set-zone", "zoned.test", "Europe/Berlin")
    zoned = [
        (line.replace(b"shop.example", b"zoned.test"), key)
        for line, key in traffic.lines
        if b"shop.ex" in line
    ]
    asyncio.run(produce(settings, zoned, pack=20))
    run_worker_to_end(settings)
    cli(settings, "sites", "set-retention", "zoned.test", "--minutes", "2")
    cli(settings, "retention", "run", "--settle", "0", "--today", "2026-03-31")
    assert with_db(settings, lambda db: audit_rollups(db, f)) == []

    # every site chart with the page documents gone
    site = "blog.example"
    per_day: Counter[date] = Counter()
    per_minute: Counter[datetime] = Counter()
    per_page: Counter[str] = Counter()
    for (s, page, minute), n in truth.items():
        if s == site:
            t = datetime.fromtimestamp(minute * 60, UTC)
            per_day[t.date()] += n
            per_page[page] += n
            if t >= END - timedelta(hours=6):
                per_minute[t.replace(tzinfo=None)] += n
    first, last = min(per_day), max(per_day)
    lo6 = END - timedelta(hours=6)
    pages = [f.daily.collection, f.monthly.collection]
    with_db(settings, lambda db: rename(db, pages, "", "_hidden"))
    try:

        async def charts(db: Any) -> dict[str, Any]:
            day = await hits_series(db, site, None, datetime(2026, 3, 1), datetime(2026, 3, 31), "day", f)
            minute = await hits_series(
                db, site, None, lo6.replace(tzinfo=None), END.replace(tzinfo=None), "minute", f
            )
            hour = await hits_series(
                db, site, None, datetime(2026, 3, 1), datetime(2026, 3, 31, 23), "hour", f
            )
            return {
                "day": {t.date(): n for t, n in day if n},
                "minute": {t: n for t, n in minute if n},
                "hour": sum(n for _, n in hour),
                "pages": await top_pages(db, site, first, last, 0, f),
                "props": sum(r.count for r in await prop_counts(db, site, None, first, last, None, f)),
                "month_pages": await top_pages(db, site, date(2026, 3, 1), date(2026, 3, 31), 0, f),
            }

        got = with_db(settings, charts)
        assert got["day"] == dict(per_day)
        assert got["minute"] == dict(per_minute)
        assert got["hour"] == sum(per_day.values())
        want_pages = sorted(per_page.items(), key=lambda r: (-r[1], r[0]))
        assert got["pages"] == want_pages and got["month_pages"] == want_pages  # exact below the budget
        assert got["props"] > 0

        server = ServeProcess(settings).start()
        try:
            url = server.url
            status, rows = call_get(
                q(url, "/api/hits", site=site, **{"from": "2026-03-01", "to": "2026-03-31", "by": "day"})
            )
            assert status == 200 and {r["t"][:10]: r["hits"] for r in rows if r["hits"]} == {
                d.isoformat(): n for d, n in per_day.items()
            }
            status, rows = call_get(
                q(
                    url,
                    "/api/pages",
                    site=site,
                    **{"from": first.isoformat(), "to": last.isoformat(), "limit": 5},
                )
            )
            assert status == 200 and [(r["page"], r["hits"]) for r in rows] == want_pages[:5]
            status, rows = call_get(
                q(url, "/api/props", site=site, **{"from": first.isoformat(), "to": last.isoformat()})
            )
            assert status == 200 and sum(r["count"] for r in rows) == got["props"]
            body = {
                "range": {"from": lo6.isoformat(), "to": END.isoformat()},
                "intervalMs": 60_000,
                "targets": [{"target": "hits", "refId": "A", "payload": {"site": site}}],
            }
            status, frames = call_post(url + "grafana/query", body)
            assert status == 200, frames
            assert sum(p[0] for p in frames[0]["datapoints"]) == sum(per_minute.values())
        finally:
            assert server.terminate() == 0
    finally:
        with_db(settings, lambda db: rename(db, pages, "_hidden", ""))


def call_get(url: str) -> tuple[int, Any]:
    import urllib.request

    return call(urllib.request.Request(url), None)


def call_post(url: str, body: Any) -> tuple[int, Any]:
    import json
    import urllib.request

    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    return call(req, None)


def test_rebuild_from_page_documents_twice_gives_the_same_rollups(settings: Settings) -> None:
    f = hits_fields(settings.schema)
    r = f.rollups
    traffic = generate(2500, end=END.timestamp(), days=3, seed=25, props=True)
    asyncio.run(produce(settings, traffic.lines, pack=20))
    run_worker_to_end(settings)

    async def snapshot(db: Any) -> dict[str, dict[str, Any]]:
        out = {}
        for c in (r.daily.collection, r.monthly.collection, r.top_daily.collection, r.top_monthly.collection):
            async for doc in db[c].find({}, {MARKS: 0}):
                out[f"{c}/{doc['_id']}"] = doc
        return out

    written = with_db(settings, snapshot)

    async def drop(db: Any) -> None:
        for c in (r.daily.collection, r.monthly.collection, r.top_daily.collection, r.top_monthly.collection):
            await db[c].delete_many({})

    with_db(settings, drop)  # as before rollups existed
    for site in ("shop.example", "blog.example", "docs.example"):
        out = cli(settings, "rollups", "rebuild", "--site", site)
        assert "rebuilt 3 daily and 1 monthly rollups" in out or "rebuilt 4 daily" in out, out
    once = with_db(settings, snapshot)
    out = cli(settings, "rollups", "rebuild", "--site", "shop.example")  # resumes: the last day again
    assert "rebuilt 1 daily and 1 monthly rollups" in out, out
    for site in ("shop.example", "blog.example", "docs.example"):
        cli(settings, "rollups", "rebuild", "--site", site, "--from", "2020-01-01")
    twice = with_db(settings, snapshot)
    assert once == twice
    assert with_db(settings, lambda db: audit_rollups(db, f)) == []
    # what the workers wrote and what the rebuild wrote count the same (top pages sorted)
    assert set(written) == set(once)
    for key, doc in written.items():
        assert doc == once[key], key

    # docs/rollups.md's commands, as written, on this data
    block = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S)[0]
    outputs = [cli(settings, *shlex.split(line)[1:]) for line in block.strip().splitlines()]
    assert "blog.example: rebuilt" in outputs[0]
    top = [line.split() for line in outputs[1].strip().splitlines()[1:]]
    assert len(top) == 3 and all(int(row[-1]) > 0 for row in top), outputs[1]
    csv_rows = list(csv.reader(io.StringIO(cli(settings, *shlex.split(block.splitlines()[1])[1:], "--csv"))))
    assert csv_rows[0] == ["page", "hits"] and [r[0] for r in csv_rows[1:]] == [r[0] for r in top]
    props = list(
        csv.DictReader(
            io.StringIO(
                cli(
                    settings,
                    "query",
                    "props",
                    "--site",
                    "blog.example",
                    "--from",
                    "2026-03-27",
                    "--to",
                    "2026-03-30",
                    "--csv",
                )
            )
        )
    )
    assert props and {"name", "value", "count"} == set(props[0]) and all(int(r["count"]) > 0 for r in props)
    days = [line.split() for line in outputs[2].strip().splitlines()[1:] if line.strip()]
    assert sum(int(row[-1]) for row in days if row[-1].isdigit()) > 0, outputs[2]


def test_page_cap_and_query_policy_bound_the_page_documents(settings: Settings) -> None:
    settings = settings.with_stream(HITS, max_pages_per_day=5, query_string="allow:id")
    f = hits_fields(settings.schema)
    noon = datetime(2026, 3, 20, 12, tzinfo=UTC).timestamp()
    lines = []
    for i in range(300):  # a crawler: a new URL per request, 50 distinct after the policy
        page = f"/item/{i % 50}/?id={i % 50}&session={i}&utm_source=bot"
        lines.append((b'{"site":"crawl.test","page":"%s","ts":%d}' % (page.encode(), noon + i), b"crawl"))
    asyncio.run(produce(settings, lines, pack=20))
    run_worker_to_end(settings)

    async def look(db: Any) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
        pages = await db[f.daily.collection].distinct(
            f"{f.daily.metadata}.{f.daily.page}", {f"{f.daily.metadata}.{f.daily.site}": "crawl.test"}
        )
        rollup = await db[f.rollups.daily.collection].find_one(
            {f"{f.rollups.daily.metadata}.{f.rollups.daily.site}": "crawl.test"}
        )
        top = await db[f.rollups.top_daily.collection].find_one({"_id": (rollup or {}).get("_id")})
        return sorted(pages), rollup or {}, top or {}

    pages, rollup, top = with_db(settings, look)
    assert len(pages) == 5 and all(
        p.startswith("/item/") and "?id=" in p and "session" not in p for p in pages
    )
    assert rollup[f.rollups.daily.total] == 300  # the site's counts stay exact
    assert rollup[f.rollups.daily.capped] == 300 - 5 * 6  # 45 pages without documents, 6 hits each
    assert top[f.rollups.top_daily.pages]["%other"] == 270
    status = cli(settings, "status")
    assert "crawl.test" in status and "270 hits" in status, status


def test_site_rollups_flushed_ahead_of_pages_count_exactly_on_two_workers_keyless(settings: Settings) -> None:
    """PREAGG_HITS_ROLLUPS_AHEAD: every record read by two flushers per worker, the site rollups'
    (their own ledger and marks, ``hits@sites``) and the pages'; keyless lines on two workers. The
    documents are those of one flush of both: every page cell exact, every rollup the sum of its
    pages; each main ledger records the family, and both ledgers end where the log ends."""
    f = hits_fields(settings.schema)
    ahead = settings.with_stream(HITS, rollups_ahead=True)
    traffic = generate(3000, end=END.timestamp(), days=2, seed=31)
    asyncio.run(produce(ahead, [(line, None) for line, _ in traffic.lines], pack=5))
    workers = [WorkerProcess(ahead, f"ahead-{i}").start() for i in range(2)]
    try:
        asyncio.run(wait_caught_up(ahead, [ahead.topic("hits")], timeout=180))
    finally:
        codes = [w.terminate() for w in workers]
    assert codes == [0, 0], [w.log_path.read_text()[-2000:] for w in workers]
    assert with_db(ahead, lambda db: audit_hits(db, traffic.per_minute, f, limit=10**6)) == []
    assert with_db(ahead, lambda db: audit_rollups(db, f)) == []

    async def ledgers(db: Any) -> list[dict[str, Any]]:
        return [d async for d in db["preagg_offsets"].find({"group": ahead.group_id})]

    found = with_db(ahead, ledgers)
    main = {d["partition"]: d for d in found if d["topic"] == ahead.topic("hits")}
    sites = {d["partition"]: d for d in found if d["topic"] == f"{ahead.topic('hits')}@sites"}
    assert main and set(sites) == set(main)
    assert all(d.get("families") == ["sites"] for d in main.values()), main
    assert all(sites[p]["next"] == main[p]["next"] for p in main), (main, sites)
