"""The dashboard opens where the data is and reads well at any width.

A site whose hits are all from May 2015 (a backfill, as the README's access log):

- opened without a range, the dashboard shows May 2015 (the current month has no hits)
  and says so; a month without hits says where the site's hits are, with a link;
- the x axis has labelled ticks, the y axis runs to a round value just above the peak in
  whole-number steps (an empty chart: 0 and 1, never "0.5 hits");
- referrers are grouped as Plausible does (none, the site's own host, other hosts);
- at 360 px nothing scrolls sideways; screenshots at 1280 and 360 px go to test-artifacts/
  (docs/dashboard.md shows them);
- events sent while no worker counts make the page say that the figures are not complete.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings
from pipeline.worker.process import WorkerProcess

from .test_dashboard import ARTIFACTS, CHROMIUM_ARGS, chromium, first_chart, produce

pytestmark = pytest.mark.integration

SITE = "old.test"
REFERRERS = ["-"] * 3 + ["old.test"] * 2 + ["www.old.test"] + ["news.example"] * 4


def may_2015() -> list[tuple[datetime, str, str]]:
    """(time, page, referrer): more hits mid-month, a few pages, every referrer kind."""
    out = []
    for day in range(1, 32):
        for i in range(3 + (16 - abs(16 - day)) * 3):
            t = datetime(2015, 5, day, 8, tzinfo=UTC) + timedelta(minutes=7 * i)
            out.append((t, ["/", "/about", "/blog/a"][i % 3], REFERRERS[(day + i) % len(REFERRERS)]))
    return out


def lines(rows: list[tuple[datetime, str, str]]) -> list[tuple[bytes, bytes]]:
    return [
        (
            orjson.dumps({"site": SITE, "page": p, "ts": t.timestamp(), "props": {"referrer": r}}),
            SITE.encode(),
        )
        for t, p, r in rows
    ]


def axis(page: Any, which: str) -> tuple[list[int], list[str]]:
    ys = page.eval_on_selector_all(f"#{which}-y span", "s => s.map(e => e.textContent)")
    xs = page.eval_on_selector_all(f"#{which}-x span", "s => s.map(e => e.textContent)")
    return [int(y.replace(",", "")) for y in ys], xs


def test_the_dashboard_opens_where_the_data_is_and_reads_at_two_widths(settings: Settings) -> None:
    from playwright.sync_api import expect, sync_playwright

    rows = may_2015()
    per_day = Counter(t.day for t, _, _ in rows)
    worker = WorkerProcess(settings, "views-worker").start()
    server = ServeProcess(settings).start()
    errors: list[str] = []
    try:
        produce(settings, lines(rows))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{server.url}?site={SITE}&refresh=1")
            first_chart(page)
            expect(page.locator("#range-label")).to_have_text("May 2015", timeout=30_000)
            expect(page.locator("#range-total")).to_have_text(f"{len(rows):,}", timeout=30_000)
            assert "the latest month with hits" in (page.locator("#where").text_content() or "")
            assert "month=2015-05" in page.url

            ys, xs = axis(page, "range")
            peak = max(per_day.values())
            step = ys[0] - ys[1]
            assert ys[-1] == 0 and ys == sorted(ys, reverse=True) and len(ys) <= 6
            assert all(a - b == step for a, b in itertools.pairwise(ys)), ys  # whole, even steps
            assert peak <= ys[0] < peak + step, (peak, ys)  # just above the peak
            assert 4 <= len(xs) <= 7 and xs[0] == "May 1" and xs[-1] == "May 31", xs

            table = page.locator("#props-groups table[data-name='referrer']")
            expect(table).to_be_visible(timeout=30_000)
            shown = dict(
                re.findall(r"^(.+?)\t([\d,]+)$", table.locator("tbody").inner_text(), re.M)  # value, count
            )
            want: Counter[str] = Counter()
            for _, _, r in rows:
                want[{"-": "Direct / None", "news.example": "news.example"}.get(r, "(internal)")] += 1
            assert {k: int(v.replace(",", "")) for k, v in shown.items()} == dict(want)
            page.screenshot(path=str(ARTIFACTS / "dashboard-1280.png"), full_page=True)

            page.set_viewport_size({"width": 360, "height": 900})
            page.reload()
            expect(page.locator("#range-total")).to_have_text(f"{len(rows):,}", timeout=30_000)
            assert page.evaluate("document.documentElement.scrollWidth") <= 360
            page.screenshot(path=str(ARTIFACTS / "dashboard-360.png"), full_page=True)

            # a month without hits: an empty chart with whole steps, and a link to the data
            page.set_viewport_size({"width": 1280, "height": 1100})
            page.goto(f"{server.url}?site={SITE}&month=2016-01&refresh=1")
            expect(page.locator("#where")).to_contain_text("has hits from May 2015", timeout=30_000)
            assert axis(page, "range")[0] == [1, 0]
            page.locator("#where button").click()
            expect(page.locator("#range-label")).to_have_text("May 2015", timeout=30_000)

            # events no worker counts yet: the page says its figures are not complete
            assert worker.terminate() == 0, worker.log_path.read_text()[-3000:]
            late = [(datetime(2015, 5, 20, 12, tzinfo=UTC), "/late", "-")] * 25
            produce(settings, lines(late), wait=False)
            expect(page.locator("#pending")).to_contain_text("not in these figures yet", timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "dashboard-pending.png"))
            browser.close()
    finally:
        server.terminate()
        if worker.alive():
            worker.terminate()
    assert not errors, errors
