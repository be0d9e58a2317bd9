"""Hits benchmark, side by side in one run on the embedded services.

1. the seed's naive design (``log_hit``: two single upserts per event) on the same events;
2. the pipeline, end to end (produce → worker → MongoDB committed), packed messages;
3. the pipeline with single-event messages;
4. MongoDB writes per event, and freshness (produced → visible in MongoDB) p50/p99;
5. replay of the public access log (if ``../shared/data`` is present).

    python -m benchmarks.hits --out bench-results/hits.json
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from datetime import time as dtime
from pathlib import Path
from typing import Any

import orjson
from pymongo import MongoClient

from benchmarks.common import add_data_option, data_file, embedded, header, step, use_data, write_results
from pipeline.files import Accepted
from pipeline.kafka.producer import EventProducer, send_lines
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.files import hit_key, read_hits
from pipeline.kinds.hits.layout import hits_fields
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.store.offsets import OFFSETS_COLLECTION
from pipeline.worker.process import WorkerProcess


def access_log() -> Path:
    """The data set this benchmark replays (``--data``)."""
    return data_file("access-logs/apache_logs")


def realtime_events(n: int, seed: int = 1, span: float = 600.0) -> list[tuple[bytes, bytes]]:
    """``n`` hits over the last ``span`` seconds: 3 sites, 200 Zipf pages each (a live stream)."""
    rng = random.Random(seed)
    now = time.time()
    sites = ["shop.example", "blog.example", "docs.example"]
    pages = [f"/page/{i}" for i in range(200)]
    weights = [1 / (i + 1) ** 1.1 for i in range(200)]
    chosen = rng.choices(pages, weights, k=n)
    out = []
    for i in range(n):
        site, page = sites[i % 3], chosen[i]
        ts = round(now - span + span * i / n, 3)
        out.append((orjson.dumps({"site": site, "page": page, "ts": ts}), hit_key(site, page)))
    return out


def naive_log_hit(mongo_url: str, db: str, events: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    """The seed's ``log_hit``: one daily and one monthly upsert per event, synchronously."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_url)
    d = client[db]
    started = time.perf_counter()
    for line, _ in events:
        e = orjson.loads(line)
        dt = datetime.fromtimestamp(e["ts"], UTC).replace(tzinfo=None)
        site, page = e["site"], e["page"]
        day = datetime.combine(dt.date(), dtime.min)
        d.stats.daily.update_one(
            {
                "_id": dt.strftime("%Y%m%d/") + site + page,
                "metadata": {"date": day, "site": site, "page": page},
            },
            {"$inc": {f"hourly.{dt.hour}": 1, f"minute.{dt.hour}.{dt.minute}": 1}},
            upsert=True,
        )
        d.stats.monthly.update_one(
            {
                "_id": dt.strftime("%Y%m/") + site + page,
                "metadata": {"date": day.replace(day=1), "site": site, "page": page},
            },
            {"$inc": {f"daily.{dt.day}": 1}},
            upsert=True,
        )
    took = time.perf_counter() - started
    client.close()
    return {"events": len(events), "seconds": took, "events_per_s": len(events) / took, "writes_per_event": 2}


async def _produce(settings: Settings, events: Sequence[tuple[bytes, bytes | None]], pack: int) -> float:
    started = time.perf_counter()
    await send_lines(settings, settings.topic("hits"), events, pack)
    return time.perf_counter() - started


def _docs_written(settings: Settings) -> int:
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    ledger = client[settings.db][OFFSETS_COLLECTION].find({"group": settings.group_id})
    total = sum(d.get("docs", 0) for d in ledger)
    client.close()
    return int(total)


def pipeline_run(
    base: Settings, name: str, events: Sequence[tuple[bytes, bytes | None]], pack: int
) -> dict[str, Any]:
    """Warm worker on an empty topic, then produce ``events`` and time until all are committed."""
    settings = base.with_(group_id=f"bench-{name}", db=f"bench_{name}")
    settings = settings.with_stream(HITS, topic=f"bench-{name}")
    asyncio.run(_produce(settings, events[:1], 1))  # creates the topic; the worker warms up on it
    worker = WorkerProcess(settings, f"bench-{name}").start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120, poll=0.2))
        started = time.perf_counter()
        produce_s = asyncio.run(_produce(settings, events[1:], pack))
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=900, poll=0.1))
        took = time.perf_counter() - started
    finally:
        worker.terminate()
    n = len(events) - 1
    docs = _docs_written(settings)
    return {
        "events": n,
        "pack": pack,
        "seconds": took,
        "events_per_s": n / took,
        "produce_seconds": produce_s,
        "produce_events_per_s": n / produce_s,
        "docs_written": docs,
        "writes_per_event": docs / len(events),
    }


async def _offer(
    p: EventProducer,
    background: Sequence[tuple[bytes, bytes | None]],
    rate: float,
    seconds: float,
    probes_per_s: float,
    probe: Callable[[float], tuple[bytes, bytes]],
    poll: Callable[[], None],
    poll_every: float,
    sleep: float,
) -> None:
    """Send ``background`` at ``rate`` events/s for ``seconds``, and a probe event (made by
    ``probe`` from its send time, flushed at once) ``probes_per_s`` times a second; ``poll`` the
    store every ``poll_every`` seconds meanwhile."""
    step = 1 / rate
    t0 = time.time()
    i, next_probe, next_poll = 0, t0, t0
    while time.time() - t0 < seconds:
        now = time.time()
        while i < len(background) and t0 + i * step <= now:
            await p.send_raw(*background[i])
            i += 1
        if now >= next_probe:
            await p.send_raw(*probe(now))
            await p.flush()
            next_probe += 1 / probes_per_s
        if now >= next_poll:
            await asyncio.to_thread(poll)
            next_poll = time.time() + poll_every
        await asyncio.sleep(sleep)


async def freshness_probes(
    settings: Settings,
    rate: float,
    seconds: float,
    probes_per_s: float,
    background: list[tuple[bytes, bytes | None]] | None = None,
) -> list[float]:
    """Send background traffic at ``rate`` events/s plus probe events on unique pages; time their arrival.

    ``background``: the events to offer (default: 3 sites x 200 pages over the last minute).
    """
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    f = hits_fields(settings.schema).daily
    coll = client[settings.db][f.collection]

    def poll() -> None:
        for d in coll.find({f"{f.metadata}.{f.site}": "probe"}, {f"{f.metadata}.{f.page}": 1}):
            page = d[f.metadata][f.page]
            seen.setdefault(page, time.time())

    def probe(now: float) -> tuple[bytes, bytes]:
        page = f"/probe/{len(sent)}"
        sent[page] = now
        return orjson.dumps({"site": "probe", "page": page, "ts": now}), hit_key("probe", page)

    async with EventProducer(settings, settings.topic("hits"), pack_size=100) as p:
        bg = background if background is not None else realtime_events(int(rate * seconds), seed=5, span=60)
        await _offer(p, bg, rate, seconds, probes_per_s, probe, poll, 0.0, 0.02)
        deadline = time.time() + 15
        while len(seen) < len(sent) and time.time() < deadline:
            await asyncio.to_thread(poll)
            await asyncio.sleep(0.02)
    client.close()
    return [seen[k] - sent[k] for k in sent if k in seen]


async def freshness_of_both(
    settings: Settings,
    rate: float,
    seconds: float,
    probes_per_s: float,
    background: list[tuple[bytes, bytes | None]],
) -> tuple[list[float], list[float]]:
    """Background traffic at ``rate`` events/s plus probe hits, each on a site of its own; per
    probe, the seconds from its send until its site's day rollup (what a site chart reads) and
    until its page's day document first count it. Polled by ``_id`` every 0.1 s."""
    from pipeline.kinds.hits.layout import daily_id, site_daily_id

    f = hits_fields(settings.schema)
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    rollups, pages = client[settings.db][f.rollups.daily.collection], client[settings.db][f.daily.collection]
    sent: dict[str, tuple[float, str, str]] = {}
    site_seen: dict[str, float] = {}
    page_seen: dict[str, float] = {}

    def poll() -> None:
        for seen, coll, which in ((site_seen, rollups, 1), (page_seen, pages, 2)):
            waiting = {v[which]: k for k, v in sent.items() if k not in seen}
            if waiting:
                for d in coll.find({"_id": {"$in": list(waiting)}}, {"_id": 1}):
                    seen.setdefault(waiting[d["_id"]], time.time())

    def probe(now: float) -> tuple[bytes, bytes]:
        site = f"probe-{len(sent)}.example"
        day = datetime.fromtimestamp(now, UTC).date()
        sent[site] = (now, site_daily_id(day, site), daily_id(day, site, "/"))
        return orjson.dumps({"site": site, "page": "/", "ts": now}), hit_key(site, "/")

    async with EventProducer(settings, settings.topic("hits"), pack_size=100) as p:
        await _offer(p, background, rate, seconds, probes_per_s, probe, poll, 0.1, 0.005)
        deadline = time.time() + 300
        while (len(site_seen) < len(sent) or len(page_seen) < len(sent)) and time.time() < deadline:
            await asyncio.to_thread(poll)
            await asyncio.sleep(0.1)
    client.close()
    site_lat = [site_seen[k] - v[0] for k, v in sent.items() if k in site_seen]
    page_lat = [page_seen[k] - v[0] for k, v in sent.items() if k in page_seen]
    return site_lat, page_lat


def freshness_run(base: Settings, rate: float = 5000, seconds: float = 20) -> dict[str, Any]:
    """Freshness under steady load with the default 1 s flush interval."""
    settings = base.with_(group_id="bench-fresh", db="bench_fresh", flush_interval=1.0)
    settings = settings.with_stream(HITS, topic="bench-fresh")
    asyncio.run(_produce(settings, realtime_events(1), 1))
    worker = WorkerProcess(settings, "bench-fresh").start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=120, poll=0.2))
        lat = asyncio.run(freshness_probes(settings, rate, seconds, probes_per_s=5))
    finally:
        worker.terminate()
    lat.sort()
    q = statistics.quantiles(lat, n=100) if len(lat) >= 2 else lat * 100
    return {
        "rate": rate,
        "probes": len(lat),
        "p50_s": statistics.median(lat),
        "p99_s": q[98],
        "max_s": lat[-1],
        "flush_interval_s": 1.0,
    }


def access_log_run(base: Settings) -> dict[str, Any] | None:
    """Replay of the public Apache access log (10k lines, 4 days) through the pipeline."""
    if not access_log().exists():
        return None
    dec = HITS.decoder(base, base.of(HITS))
    recs = list(read_hits([str(access_log())], "clf", dec, "semicomplete.com"))
    events = [(r.raw, r.key) for r in recs if isinstance(r, Accepted)]
    res = pipeline_run(base, "accesslog", events, 100)
    res["lines"] = len(recs)
    res["refused_lines"] = len(recs) - len(events)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=300_000, help="events of the packed pipeline run")
    ap.add_argument("--single-events", type=int, default=30_000, help="events of the single-event run")
    ap.add_argument("--naive-events", type=int, default=3_000, help="events through the naive design")
    ap.add_argument("--out", default="bench-results/hits.json")
    add_data_option(ap)
    args = ap.parse_args()
    use_data(args.data)

    results: dict[str, Any] = header("make bench-hits")
    events = realtime_events(args.events)
    with embedded("preagg-bench-") as (base, _):
        naive = events[: args.naive_events]
        step(
            results,
            "naive",
            "naive (seed log_hit, 2 upserts per event)",
            lambda: naive_log_hit(base.mongo_url or "", "bench_naive", naive),
        )
        step(
            results,
            "packed",
            "pipeline, packed messages (100 events/message)",
            lambda: pipeline_run(base, "packed", events, 100),
        )
        single = events[: args.single_events]
        step(
            results,
            "single",
            "pipeline, single-event messages",
            lambda: pipeline_run(base, "single", single, 1),
        )
        for kind in ("packed", "single"):
            results[f"ratio_{kind}_vs_naive"] = (
                results[kind]["events_per_s"] / results["naive"]["events_per_s"]
            )
        step(results, "freshness", "freshness under 5k events/s", lambda: freshness_run(base))
        step(results, "access_log", "access log replay", lambda: access_log_run(base))
    out = write_results(results, args.out)
    print(f"ratio packed/naive {results['ratio_packed_vs_naive']:.1f}x; results in {out}")


if __name__ == "__main__":
    main()
