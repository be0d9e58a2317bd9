"""What a readable view costs an analyst's query against reading the stored documents (``make bench-views``).

Data through a real worker on the embedded services, on a grid of shapes: Zipf pages with
visitors, over a month or two. Then each question of docs/analysts.md is asked three ways,
``--repeat`` times each (p50/p99 in ms): through its view, as the equivalent direct read of the
stored documents (the same answer: zero-filled in Python, names unescaped), and through
``preagg query``'s code (the query layer the CLI and the HTTP API use).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import orjson
from pymongo import MongoClient

from benchmarks.common import embedded, header, latency_ms, step, timed_worker_run, write_results
from pipeline.kinds.hits.layout import daily_id, hits_fields, site_monthly_id
from pipeline.kinds.hits.query import hits_series, top_pages
from pipeline.settings import Settings
from pipeline.store.names.layout import unescape_key

SITE = "views.example"
#: (pages, days, hits a day): a small site over a month, a large one over two.
SHAPES = ((200, 30, 4_000), (1_000, 45, 2_000))


def events(
    pages: int, days: int, per_day: int, end: datetime, seed: int = 5
) -> list[tuple[bytes, bytes | None]]:
    """Hits of ``pages`` Zipf pages, 1,000 visitors, over ``days`` days ending at ``end``, in time order."""
    rng = random.Random(seed)
    names = [f"/p/{i}" for i in range(pages)]
    weights = [1 / (r + 1) ** 1.05 for r in range(pages)]
    start = end.timestamp() - days * 86400
    times = sorted(rng.uniform(start, end.timestamp()) for _ in range(per_day * days))
    out: list[tuple[bytes, bytes | None]] = []
    for page, ts in zip(rng.choices(names, weights, k=len(times)), times, strict=True):
        hit = {"site": SITE, "page": page, "ts": round(ts, 3), "visitor": f"v{rng.randrange(1000)}"}
        out.append((orjson.dumps(hit), SITE.encode()))
    return out


def timed(fn: Callable[[], Any], repeat: int, budget: float = 30.0) -> dict[str, float]:
    """p50/p99 over ``repeat`` runs, or fewer when they take longer than ``budget`` seconds (a scan)."""
    fn()  # warm
    times: list[float] = []
    deadline = time.perf_counter() + budget
    while len(times) < repeat and (len(times) < 3 or time.perf_counter() < deadline):
        began = time.perf_counter()
        fn()
        times.append((time.perf_counter() - began) * 1000)
    return {**latency_ms(times), "runs": len(times)}


def questions(settings: Settings, db: Any, last: date, days: int) -> dict[str, dict[str, Callable[[], Any]]]:
    """Each cookbook question, asked through the view, directly, and through the query layer."""
    f = hits_fields(settings.schema)
    rd, pd, tm = f.rollups.daily, f.daily, f.rollups.top_monthly
    first = last - timedelta(days=29)
    lo, hi = first.isoformat(), last.isoformat()
    month = last.replace(day=1)

    def site_days_direct() -> list[tuple[str, int, Any]]:
        flt = {
            f"{rd.metadata}.{rd.site}": SITE,
            f"{rd.metadata}.{rd.date}": {"$gte": _dt(first), "$lte": _dt(last)},
        }
        proj = {f"{rd.metadata}.{rd.date}": 1, rd.total: 1, rd.visitor_count: 1}
        rows = db[rd.collection].find(flt, proj).sort(f"{rd.metadata}.{rd.date}", 1)
        return [
            (d[rd.metadata][rd.date].date().isoformat(), d.get(rd.total, 0), d.get(rd.visitor_count))
            for d in rows
        ]

    def page_hours_direct() -> list[int]:
        doc = (
            db[pd.collection].find_one(
                {"_id": daily_id(last, SITE, "/p/0"), f"{pd.metadata}.{pd.site}": SITE}, {pd.hourly: 1}
            )
            or {}
        )
        hours = doc.get(pd.hourly) or {}
        return [int(hours.get(str(h), 0)) for h in range(24)]

    def top_direct() -> list[tuple[str, int]]:
        doc = db[tm.collection].find_one({"_id": site_monthly_id(month, SITE)}, {tm.pages: 1}) or {}
        listed = [(unescape_key(k), n) for k, n in (doc.get(tm.pages) or {}).items() if k != "%other"]
        return sorted(listed, key=lambda r: (-r[1], r[0]))[:10]

    def day_pages_direct() -> int:
        flt = {f"{pd.metadata}.{pd.site}": SITE, f"{pd.metadata}.{pd.date}": _dt(last)}
        return sum(1 for _ in db[pd.collection].find(flt, {pd.total: 1}))

    import asyncio

    from pymongo import AsyncMongoClient

    def layer(coro_fn: Callable[[Any], Any]) -> Callable[[], Any]:
        def run() -> Any:
            async def go() -> Any:
                client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(settings.mongo_url)
                try:
                    return await coro_fn(client[settings.db])
                finally:
                    await client.close()

            return asyncio.run(go())

        return run

    return {
        "site_30_days": {
            "view": lambda: list(
                db.hits_site_days.find(
                    {"site": SITE, "date": {"$gte": lo, "$lte": hi}}, {"date": 1, "hits": 1, "visitors": 1}
                ).sort("date", 1)
            ),
            "documents": site_days_direct,
            "query_layer": layer(
                lambda adb: hits_series(
                    adb, SITE, None, _dt(first), _dt(last) + timedelta(hours=23), "day", f
                )
            ),
        },
        "page_hours_of_a_day": {
            "view": lambda: db.hits_page_days.find_one(
                {"site": SITE, "page": "/p/0", "date": hi}, {"hours": 1}
            ),
            "documents": page_hours_direct,
            "query_layer": layer(
                lambda adb: hits_series(
                    adb, SITE, "/p/0", _dt(last), _dt(last) + timedelta(hours=23), "hour", f
                )
            ),
        },
        "top_pages_of_a_month": {
            "view": lambda: (
                db.top_pages_months.find_one({"site": SITE, "month": month.isoformat()[:7]}) or {}
            ).get("pages", [])[:10],
            "documents": top_direct,
            "query_layer": layer(lambda adb: top_pages(adb, SITE, month, last, 10, f)),
        },
        "every_page_of_a_day": {
            "view": lambda: sum(1 for _ in db.hits_page_days.find({"site": SITE, "date": hi}, {"hits": 1})),
            "documents": day_pages_direct,
        },
    }


def _dt(d: date) -> datetime:
    return datetime(d.year, d.month, d.day)


def run_shape(pages: int, days: int, per_day: int, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {"pages": pages, "days": days, "hits": per_day * days}
    with embedded(f"views-{pages}") as (settings, _):
        end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(seconds=1)
        hits = events(pages, days, per_day, end)
        out["ingest_seconds"] = round(
            timed_worker_run(settings, settings.topic("hits"), hits, "views-load"), 1
        )
        client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
        db = client[settings.db]
        time.sleep(5)  # the workers' seals and visitor counts of the last day
        out["documents"] = {c: db[c].estimated_document_count() for c in ("hits_daily", "hits_site_daily")}
        for name, ways in questions(settings, db, end.date(), days).items():
            out[name] = {way: timed(fn, repeat) for way, fn in ways.items()}
            print(
                f"  {pages} pages x {days} days, {name}: "
                + ", ".join(f"{w} p50 {r['p50_ms']} ms" for w, r in out[name].items())
            )
        client.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="bench-results/views.json")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    results: dict[str, Any] = header("make bench-views")
    for pages, days, per_day in SHAPES:

        def shape(p: int = pages, d: int = days, n: int = per_day) -> dict[str, Any]:
            return run_shape(p, d, n, args.repeat)

        step(results, f"{pages}x{days}", f"{pages} pages, {days} days", shape)
    print(f"results: {write_results(results, args.out)}")


if __name__ == "__main__":
    main()
