"""Visits: accuracy against the rule on the raw events, and what counting them costs
(``make bench-visits``).

1. **The access log** (``../shared/data/access-logs/apache_logs``, keyed by page as ``preagg
   produce`` sends it) through a worker, visits on and off: seconds from the first send until
   the hits are counted (and, on, until the visits stage has read everything), and each day's
   visits, bounces and views against the rule applied to the log's human lines (a visitor is
   an address and browser on one UTC day, as the daily salt keys them).
2. **Generated visitors** (keyless lines in time order, 4 partitions): the same, on a shape
   with known sessions.
3. **Open visits in memory and saved** (pure): a partition's state holding 100,000 open
   visits: its Python heap (``tracemalloc``), its saved bytes, save and load times.
4. **Steady state** (:mod:`benchmarks.visits_steady`): live keyless hits of returning
   visitors, visits off then on: worker CPU per event, time to counted, visits closed and open.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
import tracemalloc
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from functools import partial
from typing import Any

import orjson

from benchmarks.common import add_data_option, data_file, embedded, header, step, use_data, write_results
from benchmarks.visits_steady import steady
from pipeline.core.sessions import Sessions, Visit, tally
from pipeline.core.visit_hits import Packed, VisitHit
from pipeline.core.visit_state import PartitionVisits, Taken, loaded
from pipeline.files import Accepted
from pipeline.kafka.producer import send_lines
from pipeline.kinds import named
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.clf import BOT_FAMILY, ClfError, agent_family, parse_line
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.files import read_hits
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.pages import PageRules
from pipeline.kinds.hits.query_visits import visit_rows
from pipeline.kinds.hits.sites.store import site_config
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.testing.traffic import generate
from pipeline.worker.process import WorkerProcess

STEPS = ("access_log", "generated", "open_visits", "steady")
Row = tuple[int, int, int]  # visits, bounces, views


def rule(hits: Iterable[tuple[str, float, str, str]]) -> dict[tuple[str, date], Row]:
    """Per (site, UTC day of a visit's start): the rule applied to ``(site, time, page, who)`` in
    time order, a visitor being ``who`` on one UTC day."""
    people: dict[tuple[str, date], int] = {}
    s = Sessions()
    closed: list[Visit] = []
    for n, (site, ts, page, who) in enumerate(sorted(hits, key=lambda h: h[1])):
        person = people.setdefault((who, datetime.fromtimestamp(ts, UTC).date()), len(people))
        closed.extend(s.add(site, person, ts, page, n))
    closed.extend(s.close(math.inf))
    totals, _ = tally(closed, lambda _site, ts: datetime.fromtimestamp(ts, UTC).date().toordinal())
    return {(site, date.fromordinal(o)): (t.visits, t.bounces, t.views) for (site, o), t in totals.items()}


def timed(settings: Settings, events: Sequence[tuple[bytes, bytes | None]], name: str) -> dict[str, float]:
    """Seconds from the first send until the hits are counted, and until the visits stage read all."""
    topic = settings.topic("hits")
    w = WorkerProcess(settings, name).start()
    try:
        began = time.perf_counter()
        asyncio.run(send_lines(settings, topic, events))
        asyncio.run(wait_caught_up(settings, [topic], timeout=1800, poll=0.1))
        hits = time.perf_counter() - began
        out = {"hits_seconds": round(hits, 2), "events_per_second": round(len(events) / hits)}
        if settings.of(HITS).visits:
            asyncio.run(wait_caught_up(settings, [settings.of(HITS).visits_topic], timeout=1800, poll=0.1))
            out["visits_seconds"] = round(time.perf_counter() - began, 2)
        return out
    finally:
        w.terminate()


async def _stored(settings: Settings, site: str, first: date, last: date) -> dict[date, dict[str, Any]]:
    client = mongo_client(settings.mongo_url or "")
    try:
        db = client[settings.db]
        cal = (await site_config(db, site)).calendar
        rows = await visit_rows(db, site, first, last, "day", hits_fields(), cal, None)
        return {r.t: r.json() for r in rows}
    finally:
        await client.close()


def compare(settings: Settings, truth: dict[tuple[str, date], Row]) -> list[dict[str, Any]]:
    """Each site-day's stored visits against the rule's (the last day of each site left out:
    its last visits are still open)."""
    out = []
    for site in sorted({s for s, _ in truth}):
        days = sorted(d for s, d in truth if s == site)
        stored = asyncio.run(_stored(settings, site, days[0], days[-1]))
        for d in days[:-1]:
            want, got = truth[(site, d)], stored[d]
            out.append(
                {
                    "site": site,
                    "day": d.isoformat(),
                    "visits": got["visits"],
                    "rule_visits": want[0],
                    "bounces": got["bounces"],
                    "rule_bounces": want[1],
                    "views": got["views"],
                    "rule_views": want[2],
                    "exact": (got["visits"], got["bounces"], got["views"]) == want,
                }
            )
    return out


def on_and_off(base: Settings, events: Sequence[tuple[bytes, bytes | None]], tag: str) -> dict[str, Any]:
    """The events through a worker with visits off, then on; the cost and the on run's settings."""
    runs: dict[str, Any] = {}
    on = named(base.with_stream(HITS, visits=True), f"visits-{tag}-on")
    off = named(base, f"visits-{tag}-off")
    runs["off"] = timed(off, events, f"visits-{tag}-off")
    runs["on"] = timed(on, events, f"visits-{tag}-on")
    runs["ratio"] = round(runs["on"]["events_per_second"] / runs["off"]["events_per_second"], 2)
    runs["settings"] = on
    return runs


def access_log(base: Settings) -> dict[str, Any]:
    path = data_file("access-logs/apache_logs")
    if not path.exists():
        return {"skipped": f"{path} not found"}
    site = "semicomplete.com"
    events = [
        (r.raw, r.key)
        for r in read_hits([str(path)], "clf", HitDecoder(16_384, 300.0), site)
        if isinstance(r, Accepted)
    ]
    pages, hits = PageRules(), []
    for line in open(path, encoding="utf-8", errors="replace"):
        try:
            rec = parse_line(line.rstrip("\n"))
        except ClfError:
            continue
        if agent_family(rec.agent) != BOT_FAMILY and rec.host not in ("", "-"):
            who = f"{rec.host}\x00{rec.agent if rec.agent != '-' else ''}"
            hits.append((site, rec.ts, pages(rec.path), who))
    runs = on_and_off(base, events, "log")
    days = compare(runs.pop("settings"), rule(hits))
    return {"events": len(events), **runs, "days": days, "exact_days": sum(d["exact"] for d in days)}


def generated(base: Settings, events: int) -> dict[str, Any]:
    end = time.time() - 10 * 86400
    traffic = generate(events, end=end, days=3, seed=43, bad_share=0.0, visitors=20_000, late_share=0)
    lines: list[tuple[bytes, bytes | None]] = [(line, None) for line, _ in traffic.lines]
    tick = orjson.dumps({"site": "tick.example", "page": "/", "ts": time.time(), "visitor": "clock"})
    runs = on_and_off(base.with_(partitions=4), lines, "gen")
    settings = runs.pop("settings")
    asyncio.run(send_lines(settings, settings.topic("hits"), [(tick, None)]))  # closes every visit
    w = WorkerProcess(settings, "visits-gen-tick").start()
    try:
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=600))
        asyncio.run(wait_caught_up(settings, [settings.of(HITS).visits_topic], timeout=600))
    finally:
        w.terminate()
    truth = rule((s, t, p, who) for s, p, t, who in traffic.identified)
    days = compare(settings, truth)
    return {"events": events, **runs, "days": days, "exact_days": sum(d["exact"] for d in days)}


def open_visits(n: int = 100_000) -> dict[str, Any]:
    """A partition's state holding ``n`` open visits (one hit each, 50 sites, 20,000 pages)."""
    state = PartitionVisits.empty(1800.0, 300.0)
    t0 = 1_764_000_000.0
    hits = [
        VisitHit(f"s{i % 50}.example", i * 2654435761 % 2**64, t0 + i / n, f"/p{i % 20_000}")
        for i in range(n)
    ]
    tracemalloc.start()  # the state only, not the hits sent to it
    state.take(Packed("g/hits@sites", 0, 1, 0, hits, t0 + 1.0, sources=1), "g", Taken())
    heap = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    began = time.perf_counter()
    parts = state.parts()
    save = time.perf_counter() - began
    head = state.head(1, len(parts))
    began = time.perf_counter()
    again = loaded(head, parts, 1800.0, 300.0)
    load = time.perf_counter() - began
    assert len(again.sessions) == n
    return {
        "open_visits": n,
        "heap_bytes_per_visit": round(heap / n),
        "saved_bytes_per_visit": round(sum(map(len, parts)) / n, 1),
        "parts": len(parts),
        "save_seconds": round(save, 3),
        "load_seconds": round(load, 3),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--events", type=int, default=100_000, help="generated hits")
    ap.add_argument("--minutes", type=float, default=3.0, help="the steady state's live minutes per run")
    ap.add_argument(
        "--shapes",
        nargs="*",
        default=["200x4"],
        help="the steady state's shapes, PAGESxPARTITIONS (Zipf pages per site of 5, hits partitions)",
    )
    ap.add_argument("--out", default="bench-results/visits.json")
    ap.add_argument("--steps", nargs="*", default=list(STEPS), choices=STEPS, help="which measurements")
    a = ap.parse_args(argv)
    use_data(a.data)
    results = header("make bench-visits")
    if "open_visits" in a.steps:
        step(results, "open_visits", "100,000 open visits in memory and saved", open_visits)
    with embedded("preagg-bench-visits-") as (base, _):
        if "access_log" in a.steps:
            step(results, "access_log", "the access log, visits on and off", lambda: access_log(base))
        if "generated" in a.steps:
            step(results, "generated", "generated visitors, keyless", lambda: generated(base, a.events))
        if "steady" in a.steps:
            for shape in a.shapes:
                pages, partitions = (int(x) for x in shape.split("x"))
                title = f"live returning visitors, 5 x {pages} pages, {partitions} partitions, visits off, on"
                name = "steady" if shape == "200x4" else f"steady_{shape}"
                step(
                    results, name, title, partial(steady, base, a.minutes, pages=pages, partitions=partitions)
                )
    write_results(results, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
