"""The dashboard's visit figures and entry and exit pages, in headless Chromium, against workers
counting visits: the headline's visits, views per visit, bounce rate and visit duration, and both
lists, equal what the visit rule computes from the events; picking a page hides the site's visits.
The screenshot goes to test-artifacts/ (docs/dashboard.md shows it)."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from typing import Any

import orjson
import pytest

from pipeline.kinds.hits import KIND as HITS
from pipeline.ops.lag import wait_caught_up
from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings
from pipeline.testing.traffic import generate
from pipeline.testing.visits_truth import stored_visits_of, visits_truth
from pipeline.worker.process import WorkerProcess

from .test_dashboard import ARTIFACTS, CHROMIUM_ARGS, chromium, first_chart, produce

pytestmark = pytest.mark.integration

SITE = "shop.example"
DAY = 86400.0


def duration(seconds: float) -> str:
    """As the dashboard writes a duration (45s, 3m 05s, 1h 02m)."""
    s = js_round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def js_round(x: float) -> int:
    """JavaScript's ``Math.round``: halves up (Python's ``round`` takes halves to even)."""
    return math.floor(x + 0.5)


def shown(page: Any) -> list[tuple[str, int, int]]:
    rows = page.eval_on_selector_all(
        "#visit-pages-table tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))"
    )
    return [(p, int(a.replace(",", "")), int(b.replace(",", ""))) for p, a, b in rows]


def test_the_dashboard_shows_visits_and_entry_and_exit_pages(settings: Settings) -> None:
    from playwright.sync_api import expect, sync_playwright

    settings = settings.with_(partitions=2).with_stream(HITS, visits=True)
    now = time.time()
    traffic = generate(3_000, end=now - 5 * DAY, days=1, seed=23, bad_share=0.0, visitors=150, late_share=0)
    figures, ends = visits_truth(traffic)
    worker = WorkerProcess(settings, "visits-dash").start()
    server = None
    errors: list[str] = []
    try:
        produce(settings, [(line, None) for line, _ in traffic.lines])  # keyless, as log shippers send
        tick = orjson.dumps({"site": "tick.example", "page": "/", "ts": now, "visitor": "clock"})
        produce(settings, [(tick, None)])  # the stage's event time passes every visit above
        topics = [settings.topic("hits"), settings.of(HITS).visits_topic]
        asyncio.run(wait_caught_up(settings, topics, timeout=180))
        deadline = time.monotonic() + 120
        while asyncio.run(stored_visits_of(settings))[0] != figures and time.monotonic() < deadline:
            time.sleep(0.5)  # the tick's visits flush may follow the wait by a moment
        days = sorted(d for s, d in figures if s == SITE)
        mine = [f for (s, _), f in figures.items() if s == SITE]
        n, bounces, views, seconds = (sum(f[i] for f in mine) for i in range(4))
        entries: Counter[str] = Counter()
        exits: Counter[str] = Counter()
        for (site, _day, page, end), k in ends.items():
            if site == SITE:
                (exits if end else entries)[page] += k

        def top(by: Counter[str], other: Counter[str]) -> list[tuple[str, int, int]]:
            ranked = sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
            return [(p, k, other[p]) for p, k in ranked]

        server = ServeProcess(settings).start()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1200})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{server.url}?site={SITE}&from={days[0]}&to={days[-1]}&refresh=1")
            first_chart(page)
            expect(page.locator("#visit-figures")).to_be_visible(timeout=30_000)
            expect(page.locator("#range-visits")).to_have_text(f"{n:,}", timeout=30_000)
            expect(page.locator("#range-views-per-visit")).to_have_text(f"{round(views / n, 2):.2f}")
            rate = js_round(round(bounces / n, 4) * 100)
            expect(page.locator("#range-bounce-rate")).to_have_text(f"{rate}%")
            expect(page.locator("#range-visit-duration")).to_have_text(duration(round(seconds / n, 1)))
            assert page.locator("#visits-note").text_content() == ""  # final: the tick closed them all
            expect(page.locator("#visit-pages")).to_be_visible()
            expect(page.locator("#visit-pages-table tbody tr")).to_have_count(10, timeout=30_000)
            assert shown(page) == top(entries, exits)
            page.screenshot(path=str(ARTIFACTS / "dashboard-visits.png"), full_page=True)

            page.locator("#exits-tab").click()
            expect(page.locator("#visit-pages-metric")).to_have_text("exits", timeout=30_000)
            assert "ends=exits" in page.url
            expect(page.locator("#visit-pages-table tbody tr").first).to_have_attribute(
                "data-page", top(exits, entries)[0][0], timeout=30_000
            )
            assert shown(page) == top(exits, entries)

            # a page picked: its hits, and no visit figures (a visit is the site's, across pages)
            page.locator("#pages-table tbody tr").first.click()
            expect(page.locator("#all-pages")).to_be_visible(timeout=30_000)
            expect(page.locator("#visit-figures")).to_be_hidden(timeout=30_000)
            browser.close()
    finally:
        if server is not None:
            server.terminate()
        assert worker.terminate() == 0, worker.log_path.read_text()[-3000:]
    assert not errors, errors
