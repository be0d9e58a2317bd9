"""The dashboard in headless Chromium against a running pipeline: the charts show the stream, then follow it.

Debian's Chromium (``make browser``, run by ``make test``) is driven by Playwright's
Python package with ``executable_path``: nothing is downloaded at test time. The
screenshot and the time to first chart are written to ``test-artifacts/``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from zoneinfo import ZoneInfo

import orjson
import pytest

from pipeline.kafka.producer import EventProducer
from pipeline.ops.lag import wait_caught_up
from pipeline.serve.process import ServeProcess
from pipeline.settings import Settings
from pipeline.store.command import on_db
from pipeline.worker.process import WorkerProcess

pytestmark = pytest.mark.integration

ARTIFACTS = Path(
    os.environ.get("PREAGG_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts")
)
#: Flags for a headless Chromium on a machine without outside network (no background calls home).
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "dash-token"
SITE = "live.test"


def first_chart(page: Any, timeout: float = 30.0) -> float:
    """Milliseconds from navigation to the first chart drawn, once there is one.

    Polled with ``evaluate`` (the DevTools protocol): ``wait_for_function`` evaluates a
    string in the page, which the dashboard's Content-Security-Policy rightly refuses.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ms = page.evaluate("window.preaggFirstChart")
        if ms is not None:
            return float(ms)
        time.sleep(0.05)
    raise AssertionError("no chart drawn")


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Chromium is missing: `make browser` installs Debian's package (make test runs it)")
    return path


def hits(times: list[float]) -> list[tuple[bytes, bytes]]:
    pages = ["/", "/pricing", "/docs"]
    return [
        (orjson.dumps({"site": SITE, "page": pages[i % 3], "ts": t, "props": {"plan": "pro"}}), SITE.encode())
        for i, t in enumerate(times)
    ]


async def send(settings: Settings, lines: list[tuple[bytes, bytes]], wait: bool = True) -> None:
    async with EventProducer(settings, settings.topic("hits"), 20) as p:
        for line, key in lines:
            await p.send_raw(line, key)
    if wait:
        await wait_caught_up(settings, [settings.topic("hits")], timeout=120)


def produce(settings: Settings, lines: list[tuple[bytes, bytes]], wait: bool = True) -> None:
    """Send (and wait until committed) on a thread of its own: Playwright's sync API holds this one's loop."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, send(settings, lines, wait)).result()


def minute_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:00Z")


@pytest.fixture
def pipeline(settings: Settings) -> Iterator[tuple[Settings, str]]:
    """A worker consuming and a server answering (with a token), both running for the whole test."""
    settings = settings.with_(serve_token=TOKEN)
    worker = WorkerProcess(settings, "dash-worker").start()
    server = None
    try:
        produce(settings, hits([time.time() - 3600 * 24 * 3]))  # topic and group are ready
        server = ServeProcess(settings).start()
        yield settings, server.url
    finally:
        if server is not None:
            server.terminate()
        assert worker.terminate() == 0, worker.log_path.read_text()[-3000:]


def test_dashboard_shows_the_stream_and_follows_it_live(pipeline: tuple[Settings, str]) -> None:
    from playwright.sync_api import expect, sync_playwright

    settings, url = pipeline
    now = time.time()
    first = [now - 60 * m - s for m in range(2, 20) for s in (5, 17, 29, 41)][:60]
    produce(settings, hits(first))
    per_minute = Counter(minute_of(t) for t in first)
    this_month = datetime.now(UTC).strftime("%Y-%m")
    month_hits = sum(1 for t in [*first, now - 3 * 86400] if minute_of(t).startswith(this_month))

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        started = time.monotonic()
        page.goto(f"{url}?site={SITE}&refresh=1#token={TOKEN}")
        first_chart_ms = first_chart(page)
        wall_ms = (time.monotonic() - started) * 1000
        expect(page.locator("#rt-total")).to_have_text(f"{len(first):,}", timeout=30_000)

        bars = page.eval_on_selector_all(
            "#rt-chart rect[data-t]", "rs => rs.map(r => [r.dataset.t, Number(r.dataset.n)])"
        )
        assert len(bars) == 60
        assert {t: n for t, n in bars if n} == dict(per_minute)
        assert page.locator("#range-total").text_content() == f"{month_hits:,}"
        assert page.locator("#site").input_value() == SITE
        top = page.eval_on_selector_all("#pages-table tbody tr", "rs => rs.map(r => r.dataset.page)")
        assert set(top) == {"/", "/pricing", "/docs"}
        assert "plan" in (page.locator("#props-groups").text_content() or "")
        page.screenshot(path=str(ARTIFACTS / "dashboard-before.png"), full_page=True)

        # More events while the page stays open: the live chart changes without a reload.
        page.evaluate("window.notReloaded = true")
        renders = int(page.locator("#rt-chart").get_attribute("data-renders") or 0)
        more = [time.time() - s for s in range(1, 41)]
        produce(settings, hits(more))
        total = len(first) + len(more)
        expect(page.locator("#rt-total")).to_have_text(f"{total:,}", timeout=60_000)
        assert page.evaluate("window.notReloaded") is True
        assert int(page.locator("#rt-chart").get_attribute("data-renders") or 0) > renders
        shown = page.eval_on_selector_all(
            "#rt-chart rect[data-t]", "rs => rs.reduce((a, r) => a + Number(r.dataset.n), 0)"
        )
        assert shown == total
        # A page of the table narrows the charts to it.
        page.locator("#pages-table tbody tr[data-page='/docs']").click()
        want_docs = sum(1 for i, _ in enumerate(first) if i % 3 == 2) + sum(
            1 for i, _ in enumerate(more) if i % 3 == 2
        )
        expect(page.locator("#rt-total")).to_have_text(f"{want_docs:,}", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        # The month chart steps back a month and forth again.
        label = page.locator("#range-label").text_content()
        page.locator("#prev").click()
        expect(page.locator("#range-label")).not_to_have_text(label or "", timeout=15_000)
        page.locator("#next").click()
        expect(page.locator("#range-label")).to_have_text(label or "", timeout=15_000)
        browser.close()
    assert not errors, errors
    (ARTIFACTS / "dashboard.json").write_text(
        json.dumps({"first_chart_ms": round(first_chart_ms), "goto_to_first_chart_ms": round(wall_ms)}) + "\n"
    )
    print(f"time to first chart: {first_chart_ms:.0f} ms after navigation start ({wall_ms:.0f} ms wall)")


def test_dashboard_asks_for_the_token_it_lacks(pipeline: tuple[Settings, str]) -> None:
    from playwright.sync_api import sync_playwright

    _, url = pipeline
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(url)
        page.wait_for_selector("#token-form:not([hidden])", timeout=15_000)
        page.fill("#token", TOKEN)
        page.click("#token-form button")
        first_chart(page)
        assert page.locator("#site").input_value() == SITE
        # ?refresh= is clamped: Infinity made the page poll in a tight loop (858 calls in 6 s).
        for given, ms in (
            ("Infinity", 5000),
            ("0", 5000),
            ("NaN", 5000),
            ("0.001", 1000),
            ("1e9", 3_600_000),
        ):
            page.goto(f"{url}?refresh={given}")
            assert page.evaluate("REFRESH_MS") == ms, given
        browser.close()


def test_dashboard_follows_the_site_time_zone(pipeline: tuple[Settings, str]) -> None:
    """A site in Asia/Kolkata: minutes labelled +05:30, the month is Kolkata's month."""
    from playwright.sync_api import expect, sync_playwright

    from pipeline.kinds.hits.sites.store import SiteConfig, plan_zone_change, save_zones
    from pipeline.kinds.hits.sites.tiers import REFRESH_SECONDS

    settings, url = pipeline
    site, tz = "kolkata.test", ZoneInfo("Asia/Kolkata")

    async def set_zone(db: Any) -> None:
        current = SiteConfig(site)
        await save_zones(
            db, current, plan_zone_change(current, "Asia/Kolkata", None, False, time.time(), 300)
        )

    on_db(settings, set_zone)
    # The running worker adopts a site's settings at its first flush after REFRESH_SECONDS
    # (docs/calendar.md: set a zone before the site's hits): hits sent sooner were planned
    # in UTC whenever the module's earlier flushes had just refreshed its cache (a flaky
    # test, seen failing under load).
    time.sleep(REFRESH_SECONDS + 1)
    now = time.time()
    times = [now - 60 * m - 7 for m in range(1, 30)]
    lines = [(orjson.dumps({"site": site, "page": "/", "ts": t}), site.encode()) for t in times]
    produce(settings, lines)
    per_minute = Counter(datetime.fromtimestamp(t, tz).strftime("%Y-%m-%dT%H:%M:00+05:30") for t in times)
    this_month = datetime.now(tz).strftime("%Y-%m")
    month_hits = sum(1 for t in times if datetime.fromtimestamp(t, tz).strftime("%Y-%m") == this_month)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(f"{url}?site={site}#token={TOKEN}")
        expect(page.locator("#rt-total")).to_have_text(f"{len(times):,}", timeout=30_000)
        expect(page.locator(".zone").first).to_have_text("Asia/Kolkata")
        bars = page.eval_on_selector_all(
            "#rt-chart rect[data-t]", "rs => rs.map(r => [r.dataset.t, Number(r.dataset.n)])"
        )
        assert {t: n for t, n in bars if n} == dict(per_minute)
        assert page.locator("#range-total").text_content() == f"{month_hits:,}"
        days = page.eval_on_selector_all("#range-chart rect[data-t]", "rs => rs.map(r => r.dataset.t)")
        assert days[0] == f"{this_month}-01T00:00:00+05:30"
        browser.close()


HISTORY = "history.test"
#: 13 pages people read, and two that crawlers do ("bots and static assets dominate top pages").
PEOPLE_PAGES = [f"/p{i:02d}" for i in range(1, 14)]
REFERRERS = [f"ref{i:02d}.example" for i in range(12)]


def history_events() -> list[tuple[str, datetime, str, str]]:
    """(page, time, agent family, referrer) of April and May 2015: people, and bots on three pages."""
    out = []
    for month, days in ((4, 30), (5, 31)):
        for d in range(1, days + 1):
            for i, page in enumerate(PEOPLE_PAGES):
                for k in range((13 - i) // 3 + (d % 3 == 0)):
                    t = datetime(2015, month, d, k % 24, i, tzinfo=UTC)
                    out.append((page, t, "Chrome" if k % 2 else "Firefox", REFERRERS[(d + i + k) % 12]))
            for k in range(6):
                out.append(("/robots.txt", datetime(2015, month, d, k, 30, tzinfo=UTC), "Bot", "-"))
            for k in range(3):
                out.append(("/feed", datetime(2015, month, d, k, 40, tzinfo=UTC), "Bot", "-"))
            out.append(("/feed", datetime(2015, month, d, 12, 40, tzinfo=UTC), "Chrome", REFERRERS[0]))
            out.append(("/p01", datetime(2015, month, d, 13, 50, tzinfo=UTC), "Bot", "-"))
    return out


def visitor_of(event: tuple[str, datetime, str, str]) -> str | None:
    """The ``visitor`` of a history event: a few people a page and hour; crawlers are nobody."""
    page, t, agent, _ = event
    return None if agent == "Bot" else f"u{(t.hour * 3 + len(page)) % 11}"


def visitors_of(events: list[tuple[str, datetime, str, str]]) -> int:
    """Unique visitors of ``events`` with the daily salt: one person on two days counts twice."""
    return len({(e[1].date(), visitor_of(e)) for e in events if visitor_of(e) is not None})


def ranked(events: list[tuple[str, datetime, str, str]]) -> list[tuple[str, int]]:
    counts = Counter(page for page, *_ in events)
    return sorted(counts.items(), key=lambda r: (-r[1], r[0]))


def api_get(url: str, path: str, **query: str) -> Any:
    from urllib.parse import urlencode
    from urllib.request import Request, urlopen

    req = Request(f"{url.rstrip('/')}{path}?{urlencode(query)}", headers={"Authorization": f"Bearer {TOKEN}"})
    with urlopen(req, timeout=60) as res:
        return json.loads(res.read())


def test_dashboard_navigates_history_by_url_range_bots_and_csv(pipeline: tuple[Settings, str]) -> None:
    """May 2015 by URL, more pages, grouped properties, bot filter, previous period, custom range, CSV."""
    from playwright.sync_api import expect, sync_playwright

    settings, url = pipeline
    events = history_events()
    produce(
        settings,
        [
            (
                orjson.dumps(
                    {
                        "site": HISTORY,
                        "page": p,
                        "ts": t.timestamp(),
                        "props": {"agent": a, "referrer": r},
                        **({"visitor": visitor_of((p, t, a, r))} if a != "Bot" else {}),
                    }
                ),
                HISTORY.encode(),
            )
            for p, t, a, r in events
        ],
    )
    may = [e for e in events if e[1].month == 5]
    may_people = [e for e in may if e[2] != "Bot"]
    april_people = [e for e in events if e[1].month == 4 and e[2] != "Bot"]
    week = [e for e in may_people if 10 <= e[1].day <= 16]

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 1000}, accept_downloads=True)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # A month by URL: no clicking back month by month (138 clicks in the issue).
        page.goto(f"{url}?site={HISTORY}&month=2015-05#token={TOKEN}")
        expect(page.locator("#range-label")).to_have_text("May 2015", timeout=30_000)
        expect(page.locator("#range-total")).to_have_text(f"{len(may):,}", timeout=30_000)
        # Unique visitors first: the month's days are exact, so is their union.
        expect(page.locator("#range-visitors")).to_have_text(f"{visitors_of(may):,}", timeout=30_000)
        bars = page.eval_on_selector_all(
            "#range-chart rect[data-t]", "rs => rs.map(r => [r.dataset.t.slice(0, 10), Number(r.dataset.n)])"
        )
        assert dict(bars) == {f"2015-05-{d:02d}": sum(1 for e in may if e[1].day == d) for d in range(1, 32)}
        # The y axis names its top; the top is at least the highest bar.
        assert int((page.locator("#range-y span").first.text_content() or "0").replace(",", "")) >= max(
            n for _, n in bars
        )
        page.locator("#range-chart rect[data-t='2015-05-17T00:00:00Z']").hover()
        expect(page.locator("#range-hover")).to_contain_text("2015-05-17:")

        # Top pages: 10, then more; all traffic first (the crawlers' pages on top).
        expect(page.locator("#pages-table tbody tr")).to_have_count(10, timeout=30_000)
        top = page.eval_on_selector_all("#pages-table tbody tr", "rs => rs.map(r => r.dataset.page)")
        assert top == [p for p, _ in ranked(may)[:10]]
        page.locator("#pages-more").click()
        expect(page.locator("#pages-table tbody tr")).to_have_count(15, timeout=30_000)
        assert "pages=20" in page.url

        # Properties grouped per name, each its top 10 and the rest behind a button.
        referrers = page.locator("#props-groups table.prop[data-name='referrer'] tbody tr:not(:has(button))")
        expect(referrers).to_have_count(10, timeout=30_000)
        page.locator("#props-groups table.prop[data-name='referrer'] button.more").click()
        expect(referrers).to_have_count(13)  # 12 referrers and "-"

        # The bot filter: the month's people only, and the pages people read.
        expect(page.locator("#bots-filter")).to_be_visible()
        page.locator("#bots").check()
        expect(page.locator("#range-total")).to_have_text(f"{len(may_people):,}", timeout=30_000)
        assert "bots=exclude" in page.url
        expect(page.locator("#pages-table tbody tr").first).to_have_attribute(
            "data-page", ranked(may_people)[0][0], timeout=30_000
        )
        shown = page.eval_on_selector_all(
            "#pages-table tbody tr",
            "rs => rs.map(r => [r.dataset.page, Number(r.cells[1].textContent.replace(/,/g, ''))])",
        )
        assert [tuple(r) for r in shown] == ranked(may_people)[:20]
        assert api_get(
            url,
            "/api/pages",
            site=HISTORY,
            **{"from": "2015-05-01", "to": "2015-05-31"},
            limit="20",
            bots="exclude",
        ) == [{"page": p, "hits": n} for p, n in ranked(may_people)]

        # One page's days less its own bots; minutes refuse the filter rather than guess.
        p01 = api_get(
            url,
            "/api/hits",
            site=HISTORY,
            page="/p01",
            by="day",
            bots="exclude",
            **{"from": "2015-05-01", "to": "2015-05-31T23:59:59"},
        )
        assert sum(r["hits"] for r in p01) == sum(1 for e in may_people if e[0] == "/p01")
        with pytest.raises(HTTPError) as refused:
            api_get(
                url,
                "/api/hits",
                site=HISTORY,
                by="minute",
                bots="exclude",
                **{"from": "2015-05-17", "to": "2015-05-17T23:59"},
            )
        assert refused.value.code == 400
        assert json.loads(refused.value.read())["parameter"] == "bots"

        # The previous period (April) as a second line.
        page.locator("#compare").check()
        expect(page.locator("#range-chart")).to_have_attribute(
            "data-previous-total", str(len(april_people)), timeout=30_000
        )
        assert page.locator("#range-chart polyline").count() == 1
        assert "compare=1" in page.url

        # CSV of what the chart shows equals the API's rows.
        with page.expect_download() as download:
            page.locator("#range-csv").click()
        lines = Path(download.value.path()).read_text().splitlines()
        assert lines[0] == "t,hits,previous_t,previous_hits"
        want = api_get(
            url,
            "/api/hits",
            site=HISTORY,
            by="day",
            bots="exclude",
            **{"from": "2015-05-01", "to": "2015-05-31T23:59:59"},
        )
        before = api_get(
            url,
            "/api/hits",
            site=HISTORY,
            by="day",
            bots="exclude",
            **{"from": "2015-04-01", "to": "2015-04-30T23:59:59"},
        )
        assert [line.split(",")[:2] for line in lines[1:]] == [[r["t"], str(r["hits"])] for r in want]
        assert [line.split(",")[2:] for line in lines[1:31]] == [[r["t"], str(r["hits"])] for r in before]
        assert sum(r["hits"] for r in want) == len(may_people)
        with page.expect_download() as download:
            page.locator("#pages-csv").click()
        pages_csv = Path(download.value.path()).read_text().splitlines()
        assert pages_csv[0] == "page,hits,visitors,visitors_exact"
        assert [tuple(line.split(",")[:2]) for line in pages_csv[1:]] == [
            (p, str(n)) for p, n in ranked(may_people)[:20]
        ]
        for line in pages_csv[1:]:
            name, _, shown_visitors, exact = line.split(",")
            truth = visitors_of([e for e in may_people if e[0] == name])
            if exact == "true":
                assert int(shown_visitors) == truth, line
            else:
                assert abs(int(shown_visitors) - truth) <= 0.05 * truth, (line, truth)
        page.screenshot(path=str(ARTIFACTS / "dashboard-history.png"), full_page=True)

        # A custom range, kept in the address; a step back; the browser's back button.
        page.fill("#from", "2015-05-10")
        page.fill("#to", "2015-05-16")
        page.locator("#apply").click()
        expect(page.locator("#range-label")).to_have_text("2015-05-10 – 2015-05-16", timeout=30_000)
        expect(page.locator("#range-total")).to_have_text(f"{len(week):,}", timeout=30_000)
        assert "from=2015-05-10" in page.url and "to=2015-05-16" in page.url
        assert page.locator("#range-chart rect[data-t]").count() == 7
        page.locator("#prev").click()
        expect(page.locator("#range-label")).to_have_text("2015-05-03 – 2015-05-09", timeout=30_000)
        page.go_back()
        expect(page.locator("#range-label")).to_have_text("2015-05-10 – 2015-05-16", timeout=30_000)
        # The same address in a new page shows the same view.
        again = context.new_page()
        again.goto(f"{page.url}#token={TOKEN}")  # a new tab: sessionStorage is per tab
        expect(again.locator("#range-total")).to_have_text(f"{len(week):,}", timeout=30_000)
        assert again.locator("#bots").is_checked()
        browser.close()
    assert not errors, errors
