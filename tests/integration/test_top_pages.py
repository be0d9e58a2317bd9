"""Top pages exact whatever the arrival order.

A Zipf backfill of three days across a month's end, shuffled, keyless (one event per
message, no key), counted by two workers at once with a small top-pages budget: every
list overflows and the busiest pages arrive anywhere in the stream. Once the workers
have sealed the lists, the top pages of each day, each month and ranges of them (with
and without bots) equal the exact ranking from the page documents; ``(other)`` is never
a row; and the CLI prints the same rows without its "not exact yet" line.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest

from pipeline.kinds.hits import KIND as HITS
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.query import top_pages
from pipeline.kinds.hits.query_bots import top_human_pages
from pipeline.kinds.hits.sites.seal import unsealed
from pipeline.ops.lag import wait_caught_up
from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

from .helpers import cli, produce, wait_sealed, with_db

pytestmark = pytest.mark.integration

SITE = "zipf.test"
START = datetime(2026, 2, 27, tzinfo=UTC)


def events(seed: int = 41) -> list[tuple[datetime, str, bool]]:
    """(time, page, bot) of 3 days: 600 pages, Zipf hits, a page that is busy only on the last day."""
    rng = random.Random(seed)
    pages = [f"/docs/{i:03d}/a-page-with-a-long-enough-name" for i in range(600)]
    weights = [1 / (i + 1) for i in range(len(pages))]
    out = []
    for day in range(3):
        for _ in range(2500):
            t = START + timedelta(days=day, seconds=rng.randrange(86400))
            out.append((t, rng.choices(pages, weights)[0], rng.random() < 0.1))
    out += [(START + timedelta(days=2, hours=23, seconds=i), "/late-and-busy", False) for i in range(400)]
    rng.shuffle(out)
    return out


def truth(
    rows: list[tuple[datetime, str, bool]], first: date, last: date, bots: bool = True
) -> list[tuple[str, int]]:
    c = Counter(p for t, p, bot in rows if first <= t.date() <= last and (bots or not bot))
    return sorted(c.items(), key=lambda r: (-r[1], r[0]))


def test_top_pages_are_exact_after_a_shuffled_keyless_backfill_by_two_workers(settings: Settings) -> None:
    # 30 entries of 600 pages: every list overflows
    settings = settings.with_stream(HITS, top_pages_bytes=1500)
    rows = events()
    lines = [
        (
            json.dumps(
                {
                    "site": SITE,
                    "page": p,
                    "ts": t.isoformat(),
                    "props": {"agent": "Bot" if bot else "Browser"},
                }
            ).encode(),
            None,
        )
        for t, p, bot in rows
    ]
    workers = [WorkerProcess(settings, f"w{i}") for i in range(2)]
    for w in workers:
        w.start()
    try:
        asyncio.run(produce(settings, lines, pack=1))
        asyncio.run(wait_caught_up(settings, [settings.topic("hits")], timeout=240))
        wait_sealed(settings)
    finally:
        for w in workers:
            assert w.terminate() == 0, w.log_path.read_text()[-3000:]
    f = hits_fields(settings.schema)
    assert with_db(settings, lambda db: unsealed(db, f)) == []
    d = [START.date() + timedelta(days=i) for i in range(3)]  # Feb 27, 28, Mar 1
    ranges = [(x, x) for x in d] + [(d[0], d[1]), (d[0], d[2]), (date(2026, 2, 1), date(2026, 2, 28))]

    async def answers(db):  # type: ignore[no-untyped-def]
        out = []
        for lo, hi in ranges:
            for limit in (1, 10):
                got = await top_pages(db, SITE, lo, hi, limit, f)
                human = await top_human_pages(db, SITE, lo, hi, limit, f)
                out.append((lo, hi, limit, list(got), got.exact, list(human), human.exact))
        return out

    for lo, hi, limit, got, exact, human, human_exact in with_db(settings, answers):
        assert exact and got == truth(rows, lo, hi)[:limit], (lo, hi, limit)
        assert human_exact and human == truth(rows, lo, hi, bots=False)[:limit], (lo, hi, limit)
    assert truth(rows, d[2], d[2])[0][0] == "/late-and-busy"

    out = cli(settings, "query", "pages", "--site", SITE, "--from", str(d[0]), "--to", str(d[2]), "--json")
    assert [(r["page"], r["hits"]) for r in json.loads(out)] == truth(rows, d[0], d[2])[:10]
