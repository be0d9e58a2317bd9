"""Query API latency on realistic data, and the dashboard's time to first chart (``make bench-api``).

Data, through a real worker on the embedded services: one site of 200 pages over the
last 30 days (Zipf traffic, half the hits with two custom properties), plus smaller
listens, impressions and relations streams. Then ``preagg serve`` answers each
endpoint ``--requests`` times over one kept-alive connection (random pages and
users), and headless Chromium loads the dashboard ``--loads`` times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from benchmarks.common import (
    embedded,
    header,
    http_connection,
    latency_ms,
    step,
    timed_request,
    timed_worker_run,
    write_results,
)
from pipeline.core.ids import id_bytes
from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings

SITE = "bench.example"
PAGES = [f"/p/{i}" for i in range(200)]
COUNTRIES = ("US", "DE", "FR", "GB", "JP", "BR", "IN")
DEVICES = ("desktop", "mobile", "tablet")


def hit_events(per_day: int, days: int, now: float, seed: int = 3) -> list[tuple[bytes, bytes | None]]:
    """``per_day`` hits a day on 200 Zipf-weighted pages over the last ``days`` days, half with props.

    In time order, as a backfill of logs arrives.
    """
    rng = random.Random(seed)
    weights = [1 / (r + 1) ** 1.05 for r in range(len(PAGES))]
    out: list[tuple[bytes, bytes | None]] = []
    start = now - days * 86400
    times = sorted(round(rng.uniform(start, now), 3) for _ in range(per_day * days))
    for page, ts in zip(rng.choices(PAGES, weights, k=len(times)), times, strict=True):
        event: dict[str, Any] = {"site": SITE, "page": page, "ts": ts}
        if rng.random() < 0.5:
            event["props"] = {"country": rng.choice(COUNTRIES), "device": rng.choice(DEVICES)}
        out.append((orjson.dumps(event), SITE.encode()))
    return out


def other_kinds(now: float, seed: int = 4) -> dict[str, list[tuple[bytes, bytes | None]]]:
    """Listens (100 users x 25 tags), 30,000 impressions (1,000 users x 500 items), 2,000 relations."""
    rng = random.Random(seed)

    def ts() -> float:
        return round(now - rng.uniform(0, 6 * 86400), 3)

    listens: list[tuple[bytes, bytes | None]] = []
    for _ in range(50_000):
        user = rng.randrange(100)
        event = {"user": user, "tag": f"tag{rng.randrange(25)}", "song": rng.randrange(2_000), "ts": ts()}
        listens.append((orjson.dumps(event), id_bytes(user)))
    imps: list[tuple[bytes, bytes | None]] = []
    for _ in range(30_000):
        user = rng.randrange(1_000)
        imps.append((orjson.dumps({"user": user, "item": rng.randrange(500), "ts": ts()}), id_bytes(user)))
    rels: list[tuple[bytes, bytes | None]] = []
    for _ in range(2_000):
        user = rng.randrange(300)
        rels.append((orjson.dumps({"user": user, "item": rng.randrange(300)}), id_bytes(user)))
    return {"listens": listens, "impressions": imps, "relations": rels}


def load(settings: Settings, per_day: int, days: int) -> dict[str, Any]:
    """Produce every stream and time a worker through each; the data the queries read."""
    now = time.time()
    hits = hit_events(per_day, days, now)
    took = {"hits": timed_worker_run(settings, settings.topic("hits"), hits, "load-hits")}
    for kind, events in other_kinds(now).items():
        took[kind] = timed_worker_run(settings, settings.topic(kind), events, f"load-{kind}")
    return {
        "hits": len(hits),
        "pages": len(PAGES),
        "days": days,
        "ingest_seconds": {k: round(v, 1) for k, v in took.items()},
    }


Request = tuple[str, str, dict[str, Any] | None]  # method, path with query, JSON body


def endpoints(rng: random.Random) -> dict[str, Callable[[], Request]]:
    """Each measured request, drawn anew per call (a random page, user or item)."""

    def page() -> str:
        return rng.choice(PAGES[:50])

    def get(path: str, **params: Any) -> Request:
        return "GET", f"{path}?{urlencode(params)}", None

    def iso(seconds_ago: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))

    def grafana_query() -> Request:  # as the JSON API data source sends it
        body = {
            "range": {"from": iso(6 * 3600), "to": iso(0)},
            "intervalMs": 30_000,
            "maxDataPoints": 1000,
            "targets": [{"target": "hits", "refId": "A", "payload": {"site": SITE}}],
        }
        return "POST", "/grafana/query", body

    return {
        "hits: site, last 60 min by minute": lambda: get("/api/hits", site=SITE),
        "hits: page, last 60 min by minute": lambda: get("/api/hits", site=SITE, page=page()),
        "hits: site, 30 days by day": lambda: get("/api/hits", site=SITE, by="day", **{"from": "now-30d"}),
        "hits: page, 30 days by day": lambda: get(
            "/api/hits", site=SITE, page=page(), by="day", **{"from": "now-30d"}
        ),
        "hits: page, 7 days by hour": lambda: get(
            "/api/hits", site=SITE, page=page(), by="hour", **{"from": "now-7d"}
        ),
        "pages: top 10 of 30 days": lambda: get("/api/pages", site=SITE, limit=10),
        "props: page, 30 days": lambda: get(
            "/api/props", site=SITE, page=page(), **{"from": "today-29d", "to": "today"}
        ),
        "props: site, 7 days": lambda: get("/api/props", site=SITE, **{"from": "today-6d", "to": "today"}),
        "sites": lambda: get("/api/sites"),
        "grafana query: site, 6 h at 30 s": grafana_query,
        "grafana hits: site, 30 days at 1 h": lambda: get(
            "/grafana/hits",
            site=SITE,
            intervalMs=3_600_000,
            **{"from": str(int((time.time() - 30 * 86400) * 1000)), "to": str(int(time.time() * 1000))},
        ),
        "top-tags: user, 7 days": lambda: get("/api/top-tags", user=rng.randrange(100)),
        "heard: user, tag, song": lambda: get(
            "/api/heard", user=rng.randrange(100), tag=f"tag{rng.randrange(25)}", song=rng.randrange(2_000)
        ),
        "impressions: items of a user": lambda: get("/api/impressions", user=rng.randrange(1_000)),
        "impressions: top 10 items": lambda: get("/api/impressions", top=10),
        "related: items of a user": lambda: get("/api/related", user=rng.randrange(300)),
    }


def latencies(urls: dict[str, str], requests: int, only: tuple[str, ...] = ()) -> dict[str, Any]:
    """p50/p99 per endpoint and server over kept-alive connections; every answer must be 200.

    With several servers (``--baseline``) each request goes to each in turn, so both
    see the same store at the same moment of a noisy machine.
    """
    conns = {label: http_connection(url) for label, url in urls.items()}
    rng = random.Random(9)
    out: dict[str, Any] = {}
    for name, make in endpoints(rng).items():
        if only and name not in only:
            continue
        times: dict[str, list[float]] = {label: [] for label in urls}
        sizes: list[int] = []
        for i in range(requests + 3):
            method, path, body = make()
            data = json.dumps(body).encode() if body is not None else None
            for label, conn in conns.items():
                took, payload = timed_request(conn, method, path, data)
                if i >= 3:  # the first three warm the path
                    times[label].append(took)
                    sizes.append(len(payload))
        row: dict[str, Any] = {"bytes": sorted(sizes)[len(sizes) // 2]}
        for label, ts in times.items():
            row[label] = {**latency_ms(ts), "max_ms": round(max(ts), 1)}
        out[name] = row
        shown = "   ".join(
            f"{label} p50 {row[label]['p50_ms']:>7} p99 {row[label]['p99_ms']:>7}" for label in urls
        )
        print(f"  {name:<38} {shown} ms", flush=True)
    for conn in conns.values():
        conn.close()
    return out


SITE_WIDE = (
    "hits: site, last 60 min by minute",
    "props: site, 7 days",
    "grafana query: site, 6 h at 30 s",
    "hits: site, 30 days by day",
    "pages: top 10 of 30 days",
)


def index_effect(settings: Settings, url: str, requests: int) -> dict[str, Any]:
    """A site's charts without and with the (site, date) indexes, one after the other on the same data."""
    from pipeline.kinds.hits.layout import indexes
    from pipeline.store.client import mongo_client

    wanted = [i for i in indexes(settings.schema) if i.name == "site_date"]

    async def change(drop: bool) -> None:
        client = mongo_client(settings.mongo_url or "")
        try:
            for i in wanted:
                coll = client[settings.db][i.collection]
                if drop:
                    await coll.drop_index(i.name)
                else:
                    await coll.create_index(list(i.keys), name=i.name)
        finally:
            await client.close()

    def measure() -> dict[str, Any]:
        rows = latencies({"serve": url}, requests, only=SITE_WIDE)
        return {name: row["serve"] for name, row in rows.items()}

    asyncio.run(change(drop=True))
    try:
        without = measure()
    finally:
        asyncio.run(change(drop=False))
    return {"without_site_date": without, "with_site_date": measure()}


def first_chart(url: str, loads: int) -> dict[str, Any]:
    """The dashboard in headless Chromium: ms from navigation to the first chart and to every card."""
    chromium = shutil.which("chromium")
    if chromium is None:
        return {"skipped": "no chromium (make browser)"}
    from playwright.sync_api import expect, sync_playwright

    args = [
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
    ]
    firsts, alls = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        for _ in range(loads):
            page = browser.new_page()
            page.goto(f"{url}?site={SITE}")
            expect(page.locator("#status")).to_contain_text("updated", timeout=60_000)
            firsts.append(float(page.evaluate("window.preaggFirstChart")))
            alls.append(float(page.evaluate("performance.now()")))
            page.close()
        browser.close()
    return {
        "loads": loads,
        "first_chart_ms": {**latency_ms(firsts), "all": [round(x) for x in firsts]},
        "all_cards_by_ms": latency_ms(alls),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-day", type=int, default=20_000, help="hits a day on the site (30 days)")
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--requests", type=int, default=100, help="requests per endpoint")
    ap.add_argument("--loads", type=int, default=5, help="dashboard loads in Chromium")
    ap.add_argument("--baseline", type=Path, help="another checkout's server, measured side by side")
    ap.add_argument("--out", default="bench-results/api.json")
    args = ap.parse_args()
    results: dict[str, Any] = header("make bench-api")
    with embedded("preagg-api-") as (base, _):
        step(
            results, "data", "loading the data through a worker", lambda: load(base, args.per_day, args.days)
        )
        servers = {"serve": ServeProcess(base).start()}
        if args.baseline is not None:
            servers["baseline"] = ServeProcess(base, name="serve-baseline", tree=args.baseline).start()
            results["baseline"] = str(args.baseline)
        try:
            urls = {label: s.url for label, s in servers.items()}
            step(
                results,
                "latency",
                f"latency, {args.requests} requests per endpoint",
                lambda: latencies(urls, args.requests),
            )
            step(
                results, "dashboard", "dashboard in Chromium", lambda: first_chart(urls["serve"], args.loads)
            )
            step(
                results,
                "site_date_index",
                "a site's charts without and with the (site, date) index",
                lambda: index_effect(base, urls["serve"], max(20, args.requests // 3)),
            )
        finally:
            for server in servers.values():
                server.terminate()
    write_results(results, args.out)


if __name__ == "__main__":
    main()
