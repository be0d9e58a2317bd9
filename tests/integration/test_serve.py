"""``preagg serve`` on the embedded services: every endpoint answers what the query layer answers.

One stream of each kind goes through a real worker; one server (with a token and a
CORS origin) answers; each answer is compared with the query function the CLI uses.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as fuzzing
from hypothesis import strategies as st
from openapi_spec_validator import validate

from pipeline.core.ids import id_bytes
from pipeline.kafka.producer import EventProducer
from pipeline.kinds import named, stream_topics
from pipeline.kinds.hits import KIND as HITS_KIND
from pipeline.kinds.hits.grafana import epoch_ms
from pipeline.kinds.hits.layout import hits_fields
from pipeline.kinds.hits.pages import PageRules
from pipeline.kinds.hits.query import hits_series, known_sites, site_months, top_pages
from pipeline.kinds.hits.query_props import prop_counts, prop_rows
from pipeline.kinds.hits.query_visitors import visitor_rows
from pipeline.kinds.hits.render import series_rows
from pipeline.kinds.impressions.query import items_of_user, top_items, users_of_item
from pipeline.kinds.listens import KIND as LISTENS
from pipeline.kinds.listens.query import heard, shown_top_tags, top_tags
from pipeline.kinds.relations import KIND as RELATIONS
from pipeline.kinds.relations.layout import relation_sides
from pipeline.kinds.relations.query import related_items, related_users
from pipeline.serve.process import ServeProcess
from pipeline.services.embedded import Endpoints
from pipeline.services.urls import for_embedded
from pipeline.settings import Settings

from .helpers import run_cli, run_worker_to_end, with_db

pytestmark = pytest.mark.integration

TOKEN = "s3cret-token"
ORIGIN = "https://grafana.example"
NOW = datetime.now(UTC).replace(second=0, microsecond=0)
TODAY = NOW.date()


def hit_lines(rng: random.Random) -> list[tuple[bytes, bytes]]:
    """Hits of two sites over the last 40 days (a month boundary inside), the last hour busiest."""
    out = []
    pages = ["/", "/a", "/b", "/c?x=1", "/über"]
    for i in range(3_000):
        site = "shop.test" if i % 4 else "blog.test"
        page = rng.choices(pages, weights=[5, 4, 3, 2, 1])[0]
        recent = rng.random() < 0.3
        back = (
            timedelta(minutes=rng.randrange(1, 60)) if recent else timedelta(hours=rng.randrange(1, 40 * 24))
        )
        ts = (NOW - back).timestamp() + rng.random() * 59
        event: dict[str, Any] = {"site": site, "page": page, "ts": round(ts, 3)}
        if rng.random() < 0.7:
            event["props"] = {"country": rng.choice(["DE", "FR", "US"]), "device": rng.choice(["m", "d"])}
        event["visitor"] = f"u{i % 60}"
        out.append((orjson.dumps(event), site.encode()))
    return out


HITS = hit_lines(random.Random(15))


def pages_truth(site: str, first: date, last: date) -> list[dict[str, Any]]:
    """Top pages counted from the events themselves, most first."""
    counts: dict[str, int] = {}
    for line, _ in HITS:
        e = orjson.loads(line)
        if e["site"] == site and first <= datetime.fromtimestamp(e["ts"], UTC).date() <= last:
            page = PageRules()(e["page"])  # "/c?x=1" counts as "/c": query strings dropped by default
            counts[page] = counts.get(page, 0) + 1
    return [{"page": p, "hits": n} for p, n in sorted(counts.items(), key=lambda r: (-r[1], r[0]))]


async def send(settings: Settings, kind: str, lines: list[tuple[bytes, bytes]]) -> None:
    async with EventProducer(settings, settings.topic(kind), 50) as p:
        for line, key in lines:
            await p.send_raw(line, key)


@pytest.fixture(scope="module")
def served(services: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, str]]:
    """A database with every kind's documents, and a token-guarded server over it."""
    tag = uuid.uuid4().hex[:8]
    base = Settings(
        partitions=2, home=tmp_path_factory.mktemp("serve"), flush_interval=0.5, session_timeout=6.0
    )
    settings = (
        for_embedded(named(base, tag), services)
        .with_(serve_token=TOKEN, serve_cors=(ORIGIN,))
        .with_stream(HITS_KIND, visits=True)
    )
    rng = random.Random(16)
    asyncio.run(send(settings, "hits", HITS))
    ts = NOW.timestamp() - 3600
    imps = [
        (orjson.dumps({"user": u, "item": rng.randrange(8), "ts": ts}), id_bytes(u))
        for u in [1, 2, "ann"] * 40
    ]
    asyncio.run(send(settings, "impressions", imps))
    rels = [(orjson.dumps({"user": u, "item": i}), id_bytes(u)) for u in range(5) for i in range(u, u + 3)]
    asyncio.run(send(settings, "relations", rels))
    songs = [
        (orjson.dumps({"user": 7, "tag": t, "song": rng.randrange(n), "ts": ts}), id_bytes(7))
        for t, n in [("rock", 50), ("jazz", 20)]
        for _ in range(2 * n)
    ]
    asyncio.run(send(settings, "listens", songs))
    run_worker_to_end(settings, topics=[*stream_topics(settings), settings.of(HITS_KIND).visits_topic])
    server = ServeProcess(settings).start()
    try:
        yield settings, server.url
    finally:
        assert server.terminate() == 0


def get(url: str, token: str | None = TOKEN, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """Status and JSON body of a GET."""
    return call(urllib.request.Request(url, headers=headers or {}), token)


def post(url: str, body: Any, token: str | None = TOKEN) -> tuple[int, Any]:
    data = json.dumps(body).encode()
    return call(urllib.request.Request(url, data, {"Content-Type": "application/json"}, method="POST"), token)


def call(req: urllib.request.Request, token: str | None) -> tuple[int, Any]:
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:  # aiohttp's own refusals (413...) are text
            return e.code, {"text": raw.decode(errors="replace")}


def q(url: str, path: str, **params: Any) -> str:
    return url + path.lstrip("/") + "?" + urlencode(params)


def test_each_endpoint_answers_the_query_layers_rows(served: tuple[Settings, str]) -> None:
    settings, url = served
    f = hits_fields(settings.schema)
    start, end = NOW - timedelta(minutes=59), NOW + timedelta(seconds=59)
    month_lo, month_hi = (NOW - timedelta(days=40)).replace(day=1, hour=0, minute=0), NOW
    first, last = TODAY - timedelta(days=35), TODAY
    ls = settings.of(LISTENS)
    spec = ls.heard()
    rs = settings.of(RELATIONS)
    sides = relation_sides(rs.user_capacity, rs.item_capacity, rs.fpr, settings.schema)
    iso = lambda t: t.isoformat().replace("+00:00", "Z")  # noqa: E731

    async def truth(db: Any) -> dict[str, Any]:
        return {
            "minute": series_rows(await hits_series(db, "shop.test", None, start, end, "minute", f)),
            "page-hour": series_rows(
                await hits_series(db, "shop.test", "/a", NOW - timedelta(days=3), NOW, "hour", f)
            ),
            "day": series_rows(await hits_series(db, "shop.test", None, month_lo, month_hi, "day", f)),
            "month": series_rows(await hits_series(db, "blog.test", None, month_lo, month_hi, "month", f)),
            "pages": [{"page": p, "hits": n} for p, n in await top_pages(db, "shop.test", first, last, 3, f)],
            "props": prop_rows(await prop_counts(db, "shop.test", "/a", first, last, None, f)),
            "sites": [
                {"site": s, "zone": "UTC", "first_month": m[0], "last_month": m[1]}
                for s in await known_sites(db, f)
                for m in [(await site_months(db, f))[s]]
            ],
            "tags": [
                {"tag": t, "distinct_songs": n} for t, n in shown_top_tags(await top_tags(db, 7, 7, 10))
            ],
            "heard": {"heard": await heard(db, 7, "rock", 3, spec)},
            "user": [{"item": i, "count": n} for i, n in await items_of_user(db, "ann")],
            "item": [{"user": u, "count": n} for u, n in await users_of_item(db, 3)],
            "top": [{"item": i, "count": n} for i, n in await top_items(db, 3, TODAY.isoformat())],
            "rel-user": await related_items(db, 2, sides),
            "rel-item": await related_users(db, 4, sides),
        }

    want = with_db(settings, truth)
    got = {
        "minute": get(q(url, "/api/hits", site="shop.test", **{"from": iso(start), "to": iso(end)})),
        "page-hour": get(
            q(
                url,
                "/api/hits",
                site="shop.test",
                page="/a",
                by="hour",
                **{"from": iso(NOW - timedelta(days=3)), "to": iso(NOW)},
            )
        ),
        "day": get(
            q(url, "/api/hits", site="shop.test", by="day", **{"from": iso(month_lo), "to": iso(month_hi)})
        ),
        "month": get(
            q(url, "/api/hits", site="blog.test", by="month", **{"from": iso(month_lo), "to": iso(month_hi)})
        ),
        "pages": get(q(url, "/api/pages", site="shop.test", limit=3, **{"from": first, "to": last})),
        "props": get(q(url, "/api/props", site="shop.test", page="/a", **{"from": first, "to": last})),
        "sites": get(q(url, "/api/sites")),
        "tags": get(q(url, "/api/top-tags", user=7)),
        "heard": get(q(url, "/api/heard", user=7, tag="rock", song=3)),
        "user": get(q(url, "/api/impressions", user="ann")),
        "item": get(q(url, "/api/impressions", item=3)),
        "top": get(q(url, "/api/impressions", top=3, day=TODAY)),
        "rel-user": get(q(url, "/api/related", user=2)),
        "rel-item": get(q(url, "/api/related", item=4)),
    }
    assert {k: v[0] for k, v in got.items()} == dict.fromkeys(got, 200)
    assert {k: v[1] for k, v in got.items()} == want
    # Not vacuous: the data is there and spans the month boundary.
    assert sum(r["hits"] for r in want["minute"]) > 300 and len(want["day"]) > 35
    assert (
        want["pages"][0]["page"] == "/"
        and want["props"]
        and [(s["site"], s["zone"]) for s in want["sites"]] == [("blog.test", "UTC"), ("shop.test", "UTC")]
    )
    assert want["tags"][0]["tag"] == "rock" and want["user"] and want["rel-user"] == [2, 3, 4]
    # Top pages are right, not only equal: across the month boundary, and within one month.
    assert want["pages"] == pages_truth("shop.test", first, last)[:3]
    mid = TODAY - timedelta(days=TODAY.day + 3), TODAY - timedelta(days=TODAY.day)  # days of last month
    status, rows = get(q(url, "/api/pages", site="blog.test", limit=100, **{"from": mid[0], "to": mid[1]}))
    assert status == 200 and rows == pages_truth("blog.test", *mid) and rows
    whole = (
        (TODAY.replace(day=1) - timedelta(days=1)).replace(day=1) - timedelta(days=5),
        TODAY,
    )  # a whole month inside
    status, rows = get(
        q(url, "/api/pages", site="blog.test", limit=100, **{"from": whole[0], "to": whole[1]})
    )
    assert status == 200 and rows == pages_truth("blog.test", *whole)
    # The CLI's new query prints the same rows.
    cli = run_cli(
        settings,
        "query",
        "pages",
        "--site",
        "shop.test",
        "--from",
        str(first),
        "--to",
        str(last),
        "--limit",
        "3",
        "--json",
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == want["pages"]


@pytest.mark.parametrize(
    ("path", "params", "parameter"),
    [
        ("/api/hits", {}, "site"),
        ("/api/hits", {"site": "s", "by": "week"}, "by"),
        ("/api/hits", {"site": "s", "form": "now"}, "form"),
        ("/api/hits", {"site": "s", "from": "yesterday"}, "from"),
        ("/api/hits", {"site": "s", "from": "now-3d"}, "from"),  # minutes: 2 days at most
        ("/api/hits", {"site": "s", "from": "now", "to": "now-1h"}, "to"),
        ("/api/pages", {"site": "s", "limit": "5000"}, "limit"),
        ("/api/pages", {"site": "s", "from": "2020-01-01", "to": "2022-01-01"}, "from"),
        ("/api/props", {"site": "s", "from": "2024-02-30"}, "from"),
        ("/api/top-tags", {"user": "1", "days": "8"}, "days"),
        ("/api/impressions", {}, "user"),
        ("/api/impressions", {"user": "1", "item": "2"}, "item"),
        ("/api/related", {"user": "1", "limit": "0"}, "limit"),
    ],
)
def test_bad_parameters_get_400_naming_them(
    served: tuple[Settings, str], path: str, params: dict[str, str], parameter: str
) -> None:
    _, url = served
    status, body = get(q(url, path, **params))
    assert status == 400, body
    assert body["parameter"] == parameter and body["error"].startswith(parameter)


@pytest.mark.parametrize("path", ["/api/hits", "/api/pages", "/api/props", "/api/visitors"])
def test_an_unknown_site_is_a_404_naming_the_closest_known(served: tuple[Settings, str], path: str) -> None:
    _, url = served
    status, sites = get(q(url, "/api/sites"))
    known = sites[0]["site"]
    misspelt = known[:-1] + ("x" if known[-1] != "x" else "y")
    span = {"from": "now-1h"} if path == "/api/hits" else {"from": "today-2d", "to": "today"}
    status, body = get(q(url, path, site=misspelt, **span))
    assert status == 404 and body["parameter"] == "site", body
    assert misspelt in body["error"] and known in body["error"], body


def test_token_cors_and_public_paths(served: tuple[Settings, str]) -> None:
    _, url = served
    assert get(q(url, "/api/sites"), token=None)[0] == 401
    assert get(q(url, "/api/sites"), token="wrong")[0] == 401
    assert post(url + "grafana/query", {}, token=None)[0] == 401
    assert get(url + "health", token=None) == (200, {"status": "ok"})
    status, body = get(url + "api/nothing")
    assert status == 404 and "/openapi.json" in body["error"]
    assert post(url + "api/hits", {})[0] == 405
    with urllib.request.urlopen(url, timeout=10) as r:  # the page itself; its calls carry the token
        assert b"/dashboard.js" in r.read() and "default-src 'self'" in r.headers["Content-Security-Policy"]
    allowed = urllib.request.Request(
        q(url, "/api/sites"), headers={"Origin": ORIGIN, "Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(allowed, timeout=10) as r:
        assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    other = urllib.request.Request(
        q(url, "/api/sites"), headers={"Origin": "https://evil.example", "Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(other, timeout=10) as r:
        assert "Access-Control-Allow-Origin" not in r.headers
    preflight = urllib.request.Request(url + "api/hits", headers={"Origin": ORIGIN}, method="OPTIONS")
    with urllib.request.urlopen(preflight, timeout=10) as r:
        assert r.status == 204 and "Authorization" in r.headers["Access-Control-Allow-Headers"]


def test_openapi_document_is_valid_and_lists_every_endpoint(served: tuple[Settings, str]) -> None:
    _, url = served
    status, doc = get(url + "openapi.json", token=None)
    assert status == 200
    validate(doc)
    for path in (
        "/api/hits",
        "/api/pages",
        "/api/props",
        "/api/sites",
        "/api/visitors",
        "/api/top-tags",
        "/api/heard",
        "/api/impressions",
        "/api/related",
        "/grafana/query",
        "/grafana/hits",
    ):
        assert path in doc["paths"], path
    assert doc["security"] == [{"bearer": []}]
    hits = doc["paths"]["/api/hits"]["get"]
    assert [p["name"] for p in hits["parameters"]] == ["site", "page", "from", "to", "by", "bots", "envelope"]
    assert "/api/pending" in doc["paths"]


def test_grafana_contracts_return_the_series(served: tuple[Settings, str]) -> None:
    settings, url = served
    f = hits_fields(settings.schema)
    assert get(url + "grafana")[0] == 200
    assert post(url + "grafana/metric-payload-options", {"metric": "hits", "name": "site"})[1] == [
        {"label": "blog.test", "value": "blog.test"},
        {"label": "shop.test", "value": "shop.test"},
    ]
    frm, to = NOW - timedelta(hours=6), NOW
    body = {  # as the JSON API data source sends it
        "range": {
            "from": frm.isoformat().replace("+00:00", ".000Z"),
            "to": to.isoformat().replace("+00:00", ".000Z"),
            "raw": {"from": "now-6h", "to": "now"},
        },
        "interval": "30s",
        "intervalMs": 30_000,
        "maxDataPoints": 1000,
        "targets": [
            {"target": "hits", "refId": "A", "payload": {"site": "shop.test"}},
            {"target": "hits", "refId": "B", "payload": {"site": "shop.test", "page": "/a"}},
        ],
    }
    status, answer = post(url + "grafana/query", body)
    assert status == 200

    async def series(db: Any) -> list[list[tuple[datetime, int]]]:
        return [await hits_series(db, "shop.test", p, frm, to, "minute", f) for p in (None, "/a")]

    want = with_db(settings, series)
    assert [a["target"] for a in answer] == ["shop.test", "shop.test/a"]
    assert answer[0]["datapoints"] == [[n, epoch_ms(t)] for t, n in want[0]]
    assert answer[1]["datapoints"] == [[n, epoch_ms(t)] for t, n in want[1]]
    # Thirty days at Grafana's 1 h interval come by the hour; the Infinity form answers rows.
    long = {
        **body,
        "range": {"from": (NOW - timedelta(days=30)).isoformat(), "to": NOW.isoformat()},
        "intervalMs": 3_600_000,
    }
    assert len(post(url + "grafana/query", long)[1][0]["datapoints"]) == 30 * 24 + 1
    ms = lambda t: str(int(t.timestamp() * 1000))  # noqa: E731
    status, rows = get(
        q(url, "/grafana/hits", site="shop.test", intervalMs=30_000, **{"from": ms(frm), "to": ms(to)})
    )
    assert status == 200 and rows == [{"time": epoch_ms(t), "hits": n} for t, n in want[0]]
    bad = {**body, "targets": [{"target": "hits", "refId": "A", "payload": {}}]}
    status, err = post(url + "grafana/query", bad)
    assert status == 400 and err["parameter"] == "targets[0].payload.site"
    # Unique visitors beside the hits, by hour at the finest (sketches are kept by hour).
    assert [m["value"] for m in post(url + "grafana/metrics", {})[1]] == ["hits", "visitors"]
    both = {
        **body,
        "targets": [*body["targets"][:1], {"target": "visitors", "payload": {"site": "shop.test"}}],
    }
    status, answer = post(url + "grafana/query", both)

    async def visitors(db: Any) -> list[Any]:
        return await visitor_rows(db, "shop.test", None, frm.date(), to.date(), "hour", f)

    rows = with_db(settings, visitors)
    assert status == 200 and [a["target"] for a in answer] == ["shop.test", "shop.test visitors"]
    assert answer[1]["datapoints"] == [[r.visitors, epoch_ms(r.t)] for r in rows]
    assert sum(n for n, _ in answer[1]["datapoints"]) > 0


def test_grafana_provisioning_files_chart_a_site(served: tuple[Settings, str]) -> None:
    """The files in docs/grafana/ parse, and each panel's URL, with Grafana's macros filled, answers."""
    import yaml

    _, url = served
    root = Path(__file__).resolve().parents[2] / "docs" / "grafana"
    sources = yaml.safe_load((root / "provisioning" / "datasources" / "preagg.yaml").read_text())
    source = sources["datasources"][0]
    assert source["type"] == "yesoreyeram-infinity-datasource"
    providers = yaml.safe_load((root / "provisioning" / "dashboards" / "preagg.yaml").read_text())
    assert providers["providers"][0]["options"]["path"]
    dash = json.loads((root / "dashboards" / "preagg-hits.json").read_text())
    base = source["jsonData"]["allowedHosts"][0]
    macros = {  # what Grafana puts in their place for "the last hour" and site shop.test
        "$site": "shop.test",
        "$page": "",
        "${__from}": str(int((NOW - timedelta(hours=1)).timestamp() * 1000)),
        "${__to}": str(int(NOW.timestamp() * 1000)),
        "$__interval_ms": "60000",
        "${__from:date:YYYY-MM-DD}": (TODAY - timedelta(days=1)).isoformat(),
        "${__to:date:YYYY-MM-DD}": TODAY.isoformat(),
    }
    variable = dash["templating"]["list"][0]["query"]["infinityQuery"]
    answers = []
    for target in [variable] + [t for panel in dash["panels"] for t in panel["targets"]]:
        assert target["url"].startswith(base) and target["datasource"]["uid"] == source["uid"]
        params = {p["key"]: macros.get(p["value"], p["value"]) for p in target["url_options"]["params"]}
        address = (
            url + target["url"][len(base) + 1 :] + "?" + urlencode({k: v for k, v in params.items() if v})
        )
        for _ in range(120):  # /api/pending answers null per kind until the server's first look
            status, rows = get(address)
            if target.get("root_selector"):
                rows = rows[target["root_selector"]]
            if rows is not None:
                break
            time.sleep(0.5)
        assert status == 200, rows
        first = rows[0] if isinstance(rows, list) else rows
        assert {c["selector"] for c in target["columns"]} <= set(first)
        answers.append(rows)
    sites, series, pending, pages, visitors, visits, entries, exits = answers
    assert {"site": "shop.test", "zone": "UTC"}.items() <= next(
        s for s in sites if s["site"] == "shop.test"
    ).items()
    assert pending["complete"] is True and pending["messages"] == 0
    assert len(series) == 61 and sum(r["hits"] for r in series) > 0
    assert pages[0]["page"] == "/" and pages[0]["visitors"] > 0
    assert len(visitors) == 1 and visitors[0]["visitors"] > 0 and visitors[0]["hits"] > 0
    assert len(visits) == 1 and visits[0]["visits"] > 0 and 0 <= visits[0]["bounce_rate"] <= 1
    assert sum(r["entries"] for r in entries) == sum(r["exits"] for r in exits) > 0  # one of each a visit


# Hostile requests: every parameter and body is refused with a 400 naming it, never a 500.

ISSUE_23_INPUTS: list[tuple[str, dict[str, str] | dict[str, Any], str]] = [
    # (path, GET parameters or POST body, the parameter the 400 names)
    *[
        ("/grafana/query", {"range": {"from": "now-6h", "to": "now"}, "targets": [], field: value}, field)
        for field in ("intervalMs", "maxDataPoints")
        for value in (float("nan"), float("inf"), 1e308)
    ],
    (
        "/grafana/query",
        {"range": {"from": "99999999999999999999999", "to": "now"}, "targets": []},
        "range.from",
    ),
    ("/grafana/query", {"range": {"from": "now-99999999999d", "to": "now"}, "targets": []}, "range.from"),
    ("/grafana/query", {"range": {"from": "now-6h", "to": "now+99999999999w"}, "targets": []}, "range.to"),
    (
        "/grafana/query",
        {"range": {"from": "1774785600000", "to": "2026-03-29T10:00:00"}, "targets": []},
        "range",
    ),
    (
        "/grafana/query",
        {"range": {"from": "now-6h", "to": "now"}, "targets": [{"payload": {"site": "x" * 3000}}]},
        "targets[0].payload.site",
    ),
    (
        "/grafana/hits",
        {"site": "s", "from": "now-1h", "to": "now", "intervalMs": "100000000000000000000000"},
        "intervalMs",
    ),
    ("/grafana/hits", {"site": "s", "from": "99999999999999999999999", "to": "now"}, "from"),
    ("/api/hits", {"site": "s", "by": "month", "from": "9999-12-30", "to": "9999-12-31T23:59"}, "from"),
    ("/api/hits", {"site": "s", "from": "now-99999999999d", "to": "now"}, "from"),
    ("/api/top-tags", {"user": "1", "today": "0001-01-01"}, "today"),
    ("/api/top-tags", {"user": "1", "today": "today-99999999999d"}, "today"),
]


@pytest.mark.parametrize(("path", "given", "parameter"), ISSUE_23_INPUTS)
def test_inputs_that_answered_500_are_400s_naming_the_parameter(
    served: tuple[Settings, str], path: str, given: dict[str, Any], parameter: str
) -> None:
    _, url = served
    if path in ("/grafana/query",):
        req = urllib.request.Request(
            url + path.lstrip("/"),
            json.dumps(given).encode(),  # NaN and Infinity as Python writes them
            {"Content-Type": "application/json"},
            method="POST",
        )
        status, body = call(req, TOKEN)
    else:
        status, body = get(q(url, path, **given))
    assert status == 400, body
    assert body["parameter"] == parameter, body


def test_deep_bodies_and_other_content_types_are_400s(served: tuple[Settings, str]) -> None:
    _, url = served
    deep = b'{"range":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    req = urllib.request.Request(
        url + "grafana/query", deep, {"Content-Type": "application/json"}, method="POST"
    )
    status, body = call(req, TOKEN)
    assert status in (400, 413) and (status == 413 or body["parameter"] == "body"), body
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        req = urllib.request.Request(url + "grafana/query", b"{}", {"Content-Type": ctype}, method="POST")
        status, body = call(req, TOKEN)
        assert status == 400 and body["parameter"] == "Content-Type", (ctype, body)


def test_host_header_nosniff_and_server_header(served: tuple[Settings, str]) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 sends Host: evil.example."""
    _, url = served
    port = url.rstrip("/").rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
        status, body = get(q(url, "/api/sites"), headers={"Host": host})
        assert status == 421 and body["parameter"] == "Host", (host, body)
    req = urllib.request.Request(url, headers={"Host": "rebind.example"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 421  # the dashboard too
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST"):
        assert get(q(url, "/api/sites"), headers={"Host": host})[0] == 200, host
    req = urllib.request.Request(q(url, "/api/sites"), headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert r.headers["Server"] == "preagg"


HOSTILE_TEXT = st.one_of(
    st.sampled_from(
        [
            "NaN",
            "Infinity",
            "-Infinity",
            "1e308",
            "1e23",
            "-1",
            "0",
            "99999999999999999999999",
            "9999-12-31",
            "0001-01-01",
            "9999-12-31T23:59",
            "2026-03-29T10:00:00",
            "now-99999999999d",
            "now+99999999999w",
            "today-99999999999d",
            "today",
            "now",
            "1774785600000",
            "\x00",
            "%00",
            "x" * 3000,
            "2026-02-30",
            "true",
            "minute",
            "month",
            "/",
            "ann",
        ]
    ),
    st.text(max_size=30),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
    max_leaves=12,
)


@st.composite
def get_query(draw: st.DrawFn, params: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for p in params:
        if p.get("required") or draw(st.booleans()):
            out[p["name"]] = draw(HOSTILE_TEXT)
    if draw(st.integers(0, 9)) == 0:
        out[draw(st.text(min_size=1, max_size=8))] = draw(HOSTILE_TEXT)
    return out


@st.composite
def grafana_body(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 4)) == 0:
        return draw(JSON_VALUES)
    body: dict[str, Any] = {
        "range": {"from": draw(HOSTILE_TEXT | JSON_VALUES), "to": draw(HOSTILE_TEXT | JSON_VALUES)},
        "targets": draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "target": st.sampled_from(["hits", "visitors"]) | JSON_VALUES,
                        "payload": st.fixed_dictionaries(
                            {
                                "site": st.sampled_from(["shop.test", "blog.test"]) | JSON_VALUES,
                                "page": HOSTILE_TEXT | JSON_VALUES,
                            }
                        ),
                    }
                ),
                max_size=3,
            )
            | JSON_VALUES
        ),
    }
    for name in ("intervalMs", "maxDataPoints", "name"):
        if draw(st.booleans()):
            body[name] = draw(JSON_VALUES)
    return body


def test_fuzz_every_endpoint_of_the_openapi_document_never_answers_5xx(served: tuple[Settings, str]) -> None:
    """Property: for any parameters or body, every endpoint answers < 500, and a 400 names what is wrong."""
    _, url = served
    status, doc = get(url + "openapi.json", token=None)
    assert status == 200
    seen: dict[int, int] = {}

    def check(status: int, body: Any, what: str) -> None:
        seen[status] = seen.get(status, 0) + 1
        assert status < 500, (what, body)
        if status == 400 and "text" not in body:  # aiohttp's own refusals (request line > 8 KB) are text
            assert body.get("parameter"), (what, body)

    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            if method == "get":
                fuzz_get(url, path, op.get("parameters", []), check)
            else:
                fuzz_post(url, path, check)
    assert seen.get(200, 0) > 0 and seen.get(400, 0) > 0, seen


def fuzz_get(url: str, path: str, params: list[dict[str, Any]], check: Any) -> None:
    @fuzzing(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(query=get_query(params))
    def run(query: dict[str, str]) -> None:
        check(*get(q(url, path, **query)), f"GET {path} {query!r}")

    run()


def fuzz_post(url: str, path: str, check: Any) -> None:
    @fuzzing(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(body=grafana_body())
    def run(body: Any) -> None:
        data = json.dumps(body).encode()
        req = urllib.request.Request(
            url + path.lstrip("/"), data, {"Content-Type": "application/json"}, method="POST"
        )
        check(*call(req, TOKEN), f"POST {path} {body!r}")

    run()
