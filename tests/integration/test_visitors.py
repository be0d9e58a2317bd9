"""Unique visitors end to end: an access log produced, counted by a worker, read by the CLI and the API."""

from __future__ import annotations

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


def _access_log(path: Path, lines: int, addresses: int, seed: int) -> dict[date, dict[str, set[str]]]:
    """A generated access log over the last two UTC days; per day and page (and ``""``: the
    site), the distinct address + browser pairs of its human hits (crawlers are no visitors)."""
    rng = random.Random(seed)
    end = time.time()
    truth: dict[date, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    out = []
    for i in range(lines):
        ts = int(end - rng.uniform(0, 2 * 86_400))
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


def _query(s: Settings, *args: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(cli(s, "query", "visitors", "--site", SITE, *args, "--json"))
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
    assert len(total) == 1
    summed = sum(len(truth[d][""]) for d in days)
    assert abs(total[0]["visitors"] - summed) <= 0.05 * summed, (total, summed)

    # Nothing stored holds a client address in clear.
    async def stored(db):  # type: ignore[no-untyped-def]
        return [d async for d in db["hits_daily"].find({}, {"_id": 0})]

    docs = with_db(s, stored)
    assert docs and not any("10." in json.dumps(d, default=str) for d in docs)


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
    want = {"t": f"{days[0].isoformat()}T00:00:00", "visitors": len(everyone), "exact": True, "hits": 400}
    assert total == [want]
    yesterday = (datetime.now(UTC).date() - timedelta(days=1)).isoformat()
    hours = _query(s, "--from", yesterday, "--to", yesterday, "--by", "hour")
    assert len(hours) == 24 and all(r["exact"] for r in hours)
    assert max(int(str(r["visitors"])) for r in hours) > 0


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
