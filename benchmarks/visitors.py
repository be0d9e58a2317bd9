"""Unique visitors: accuracy, bytes per document and ingest cost, on and off (``make bench-visitors``).

1. **Sketch accuracy** (pure, no servers): 100 to 1,000,000 distinct visitors written by one
   worker in 20 flushes (:class:`pipeline.core.uniques.Budget`, ``$max`` applied as MongoDB
   applies it), 5 seeds each: the estimate's relative error, whether it says exact, and the
   holder's fields.
2. **The access log** (``../shared/data/access-logs/apache_logs``) through a worker, visitors on
   (daily salt, then fixed) and off: each day's site visitors and each page-day's against the
   exact distinct (client address, user agent) pairs of its human lines; the four days with
   the fixed salt against the distinct pairs and addresses overall; bytes per daily document.
3. **A 30-day site chart**: 90,000 keyless hits of one site over 30 days, 4 partitions: the
   documents a ``--by day`` chart reads, its time and the rollups' bytes, before and after
   the days are folded (docs/visitors.md).
4. **100,000 pages**: 300,000 hits of one day over 100,000 Zipf pages from 30,000 visitors,
   through a worker, on and off: events/s from the first send, bytes per page and site document.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

import bson
import orjson
from pymongo import MongoClient

from benchmarks.common import (
    add_data_option,
    data_file,
    embedded,
    header,
    step,
    timed_worker_run,
    use_data,
    write_results,
)
from pipeline.core.uniques import EXPLICIT_MAX, Budget, estimate, merged_blob, register_ranks_of
from pipeline.files import Accepted
from pipeline.kinds import named
from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.clf import BOT_FAMILY, ClfError, agent_family, parse_line
from pipeline.kinds.hits.decode import HitDecoder
from pipeline.kinds.hits.files import hit_key, read_hits
from pipeline.kinds.hits.layout import hits_fields, register_fields
from pipeline.kinds.hits.pages import PageRules
from pipeline.kinds.hits.query_visitors import visitor_rows
from pipeline.settings import Settings
from pipeline.store.client import mongo_client
from pipeline.testing.sketches import apply_share

F = hits_fields("compact")
STEPS = ("sketch_accuracy", "access_log", "month_chart", "many_pages")
SIZES = (100, 1_000, 10_000, 100_000, 1_000_000)


def sketch_accuracy(seeds: int = 5) -> list[dict[str, Any]]:
    """Relative error of the stored sketch per set size, written in 20 flushes by one writer: the
    shared form (``$bit or`` of thermometer words) and a partition's (one field, read, maxed and
    set: :func:`~pipeline.core.uniques.merged_blob`), which workers write by default."""
    out = []
    for n in SIZES:
        errors, exact, fields, partition_errors, blob_bytes = [], 0, [], [], []
        for seed in range(seeds):
            rng = random.Random(seed * 7919 + n)
            hashes = [rng.getrandbits(64) for _ in range(n)]
            budget, doc = Budget(), dict[str, Any]()
            blob: bytes | None = None
            per = max(1, n // 20)
            for at in range(0, n, per):
                share = budget.fields("c", 1, "v", set(hashes[at : at + per]))
                apply_share(doc, share)
                if share.words:
                    blob = merged_blob(blob, register_ranks_of(hashes[at : at + per]))
            got = estimate([doc["v"]], [doc["v"].get("r")])
            errors.append(abs(got.value - n) / n)
            exact += got.exact
            fields.append(len(doc["v"].get("x", {})) + len(doc["v"].get("r", {})))
            mine = estimate([{k: v for k, v in doc["v"].items() if k != "r"}], [blob] if blob else [])
            partition_errors.append(abs(mine.value - n) / n)
            blob_bytes.append(len(blob or b""))
        out.append(
            {
                "visitors": n,
                "mean_abs_error_pct": round(100 * statistics.mean(errors), 3),
                "max_abs_error_pct": round(100 * max(errors), 3),
                "exact_runs": exact,
                "runs": seeds,
                "fields": max(fields),
                "partition_mean_abs_error_pct": round(100 * statistics.mean(partition_errors), 3),
                "partition_max_abs_error_pct": round(100 * max(partition_errors), 3),
                "partition_register_bytes": max(blob_bytes),
            }
        )
    return out


def _truth(path: str) -> dict[str, Any]:
    """Per UTC day: distinct (address, agent) pairs of human lines, per page and for the site."""
    pages = PageRules()
    day_site: dict[date, set[tuple[str, str]]] = defaultdict(set)
    day_page: dict[tuple[date, str], set[tuple[str, str]]] = defaultdict(set)
    for line in open(path, encoding="utf-8", errors="replace"):
        try:
            rec = parse_line(line.rstrip("\n"))
        except ClfError:
            continue
        if agent_family(rec.agent) == BOT_FAMILY:
            continue
        day = datetime.fromtimestamp(rec.ts, UTC).date()
        who = (rec.host, rec.agent if rec.agent != "-" else "")
        day_site[day].add(who)
        day_page[day, pages(rec.path)].add(who)
    return {"site": day_site, "page": day_page}


def _doc_bytes(settings: Settings) -> dict[str, Any]:
    """Mean and largest BSON size of the page and site daily documents."""
    client: MongoClient[dict[str, Any]] = MongoClient(settings.mongo_url)
    out = {}
    for name in (F.daily.collection, F.rollups.daily.collection, register_fields().collection):
        sizes = [len(bson.encode(d)) for d in client[settings.db][name].find({})] or [0]
        out[name] = {
            "documents": len(sizes),
            "mean_bytes": round(statistics.mean(sizes)),
            "max_bytes": max(sizes),
        }
    client.close()
    return out


async def _rows(settings: Settings, site: str, page: str | None, first: date, last: date, by: str) -> Any:
    client = mongo_client(settings.mongo_url or "")
    try:
        return await visitor_rows(client[settings.db], site, page, first, last, by, F)
    finally:
        await client.close()


def _pct(got: int, want: int) -> float:
    return round(100 * abs(got - want) / want, 2) if want else 0.0


def access_log(base: Settings) -> dict[str, Any]:
    """The real access log through a worker: visitors against the raw lines' distinct pairs."""
    path = data_file("access-logs/apache_logs")
    if not path.exists():
        return {"skipped": f"{path} not found"}
    site = "semicomplete.com"
    decoder = HitDecoder(16_384, 300.0)
    events = [(r.raw, r.key) for r in read_hits([str(path)], "clf", decoder, site) if isinstance(r, Accepted)]
    truth = _truth(str(path))
    days = sorted(truth["site"])
    out: dict[str, Any] = {"events": len(events)}
    for tag, settings in (
        ("on-daily", base.with_stream(HITS, visitor_salt="daily")),
        ("on-fixed", base.with_stream(HITS, visitor_salt="fixed")),
        ("off", base.with_stream(HITS, visitors=False)),
    ):
        s = named(settings, f"vis-log-{tag}")
        seconds = timed_worker_run(s, s.topic("hits"), events, f"vis-{tag}")
        run: dict[str, Any] = {"seconds": round(seconds, 1), "bytes": _doc_bytes(s)}
        if tag != "off":
            rows = asyncio.run(_rows(s, site, None, days[0], days[-1], "day"))
            run["site_days"] = [
                {
                    "day": r.t.date().isoformat(),
                    "visitors": r.visitors,
                    "exact_pairs": len(truth["site"][r.t.date()]),
                    "error_pct": _pct(r.visitors, len(truth["site"][r.t.date()])),
                    "exact": r.exact,
                    "hits": r.hits,
                }
                for r in rows
            ]
            total = asyncio.run(_rows(s, site, None, days[0], days[-1], "total"))[0]
            pairs = set().union(*truth["site"].values())
            run["total"] = {
                "visitors": total.visitors,
                "exact": total.exact,
                "distinct_pairs_over_the_days": len(pairs),
                "sum_of_daily_pairs": sum(len(v) for v in truth["site"].values()),
                "distinct_addresses": len({ip for ip, _ in pairs}),
            }
            page_errors, exact_pages, checked = [], 0, 0
            busiest = sorted(truth["page"].items(), key=lambda kv: -len(kv[1]))[:200]
            for (day, page), who in busiest:
                (r,) = asyncio.run(_rows(s, site, page, day, day, "day"))
                checked += 1
                exact_pages += r.exact and r.visitors == len(who)
                page_errors.append(_pct(r.visitors, len(who)))
            run["page_days"] = {
                "checked": checked,
                "exact_and_right": exact_pages,
                "max_error_pct": max(page_errors),
                "largest": len(busiest[0][1]),
            }
        out[tag] = run
    return out


def zipf_events(pages: int, hits: int, people: int, seed: int) -> list[tuple[bytes, bytes]]:
    """``hits`` of one site and one recent day over ``pages`` Zipf pages, ``people`` Zipf visitors."""
    rng = random.Random(seed)
    page_cum = list(itertools.accumulate(1 / (r + 1) ** 1.05 for r in range(pages)))
    people_cum = list(itertools.accumulate(1 / (r + 1) ** 0.8 for r in range(people)))
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp() - 86_400
    out = []
    for i in range(hits):
        page = f"/p/{bisect.bisect(page_cum, rng.random() * page_cum[-1]):06d}"
        who = bisect.bisect(people_cum, rng.random() * people_cum[-1])
        event = {"site": "big.example", "page": page, "ts": day + i * 86_000 / hits, "visitor": f"v{who}"}
        out.append((orjson.dumps(event), hit_key("big.example", page)))
    return out


def many_pages(base: Settings, events: Sequence[tuple[bytes, bytes]]) -> dict[str, Any]:
    out = {}
    for tag, settings in (("on", base), ("off", base.with_stream(HITS, visitors=False))):
        s = named(settings, f"vis-100k-{tag}")
        seconds = timed_worker_run(s, s.topic("hits"), events, f"vis-100k-{tag}")
        out[tag] = {
            "seconds": round(seconds, 1),
            "events_per_s": round(len(events) / seconds),
            "bytes": _doc_bytes(s),
        }
    return out


def month_events(days: int, hits_per_day: int, people: int, seed: int) -> list[tuple[bytes, bytes | None]]:
    """``days`` of one site's hits without a message key (every partition writes every day's
    rollup), ending two days ago: Zipf pages and visitors."""
    rng = random.Random(seed)
    people_cum = list(itertools.accumulate(1 / (r + 1) ** 0.8 for r in range(people)))
    last = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp() - 2 * 86_400
    out: list[tuple[bytes, bytes | None]] = []
    for d in range(days):
        start = last - (days - 1 - d) * 86_400
        for i in range(hits_per_day):
            who = bisect.bisect(people_cum, rng.random() * people_cum[-1])
            page = f"/p/{min(int(rng.paretovariate(1.2)), 500)}"
            event = {"site": "month.example", "page": page, "ts": start + i * 86_000 / hits_per_day}
            event["visitor"] = f"v{who}"
            out.append((orjson.dumps(event), None))
    return out


def month_chart(base: Settings, events: Sequence[tuple[bytes, bytes | None]], days: int) -> dict[str, Any]:
    """A 30-day site chart before and after its days are folded (``preagg retention run``'s fold):
    the documents it reads, its time, the rollups' bytes, and the fold's time."""
    from pipeline.kinds.hits.registers import register_ids
    from pipeline.kinds.hits.sites.fold import fold_pending

    s = named(base.with_stream(HITS, visitors_fold_after=0.0), "vis-month")
    seconds = timed_worker_run(s, s.topic("hits"), events, "vis-month")
    last = datetime.now(UTC).date() - timedelta(days=2)
    first = last - timedelta(days=days - 1)
    rd = F.rollups.daily

    async def measure() -> dict[str, Any]:
        client = mongo_client(s.mongo_url or "")
        db = client[s.db]
        try:
            docs = [d async for d in db[rd.collection].find({f"{rd.metadata}.{rd.site}": "month.example"})]
            reads = len(docs) + sum(
                len(register_ids(rd.collection, d["_id"], rd.visitors, d.get(rd.visitors)))
                for d in docs
                if (d.get(rd.visitors) or {}).get("o")
            )
            times = []
            for _ in range(7):
                t0 = time.perf_counter()
                rows = await visitor_rows(db, "month.example", None, first, last, "day", F)
                times.append(time.perf_counter() - t0)
            sizes = [len(bson.encode(d)) for d in docs]
            return {
                "days": len(docs),
                "documents_read": reads,
                "chart_ms_median": round(1000 * statistics.median(times), 1),
                "rollup_mean_bytes": round(statistics.mean(sizes)),
                "rollup_max_bytes": max(sizes),
                "visitors": [r.visitors for r in rows],
            }
        finally:
            await client.close()

    async def fold() -> tuple[int, float]:
        client = mongo_client(s.mongo_url or "")
        try:
            t0 = time.perf_counter()
            n = await fold_pending(client[s.db], F, datetime.now(UTC).date())
            return n, time.perf_counter() - t0
        finally:
            await client.close()

    before = asyncio.run(measure())
    folds, fold_s = asyncio.run(fold())
    after = asyncio.run(measure())
    return {
        "events": len(events),
        "seconds": round(seconds, 1),
        "before": before,
        "folded_rollups": folds,
        "fold_seconds": round(fold_s, 2),
        "after": after,
        "same_answers": before["visitors"] == after["visitors"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(ap)
    ap.add_argument("--hits", type=int, default=300_000, help="hits of the 100,000-page day")
    ap.add_argument("--out", default="bench-results/visitors.json")
    ap.add_argument("--steps", nargs="*", default=list(STEPS), choices=STEPS, help="which measurements")
    a = ap.parse_args(argv)
    use_data(a.data)
    results = header("make bench-visitors")
    results["explicit_max"] = EXPLICIT_MAX
    if "sketch_accuracy" in a.steps:
        step(results, "sketch_accuracy", "sketch accuracy, 100 to 1,000,000 visitors", sketch_accuracy)
    with embedded("preagg-bench-visitors-") as (base, _):
        if "access_log" in a.steps:
            step(
                results,
                "access_log",
                "the access log, visitors on (daily, fixed) and off",
                lambda: access_log(base),
            )
        if "month_chart" in a.steps:
            month = month_events(30, 3_000, 20_000, seed=41)
            step(
                results,
                "month_chart",
                "a 30-day site chart, before and after folds",
                lambda: month_chart(base, month, 30),
            )
        if "many_pages" in a.steps:
            events = zipf_events(100_000, a.hits, 30_000, seed=40)
            step(
                results, "many_pages", "100,000 pages, visitors on and off", lambda: many_pages(base, events)
            )
    write_results(results, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
