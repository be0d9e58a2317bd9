"""The query API's pure parts: parameters, Grafana's resolution and bodies, the OpenAPI document."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from openapi_spec_validator import validate

from pipeline.core.params import BadParam, Param, exactly_one, parse_params
from pipeline.core.routes import Route
from pipeline.kinds import load_kinds
from pipeline.kinds.hits.grafana import choose_by, parse_panel_query, visitor_by
from pipeline.serve.openapi import openapi_document
from pipeline.settings import Settings

NOW = datetime(2026, 3, 29, 12, 0, tzinfo=UTC)


def bad(params: tuple[Param, ...], query: dict[str, str]) -> BadParam:
    with pytest.raises(BadParam) as err:
        parse_params(params, query, NOW)
    return err.value


def test_parameters_parse_defaults_and_name_what_is_wrong() -> None:
    params = (
        Param("site", "", required=True),
        Param("from", "", "time", default="now-60m"),
        Param("day", "", "date", default="today-7d"),
        Param("by", "", "choice", default="minute", choices=("minute", "hour")),
        Param("limit", "", "integer", default="10", minimum=1, maximum=100),
        Param("user", "", "id"),
    )
    got = parse_params(params, {"site": "s", "user": "42"}, NOW)
    assert got == {
        "site": "s",
        "from": NOW - timedelta(minutes=60),
        "day": date(2026, 3, 22),
        "by": "minute",
        "limit": 10,
        "user": 42,
    }
    assert parse_params(params, {"site": "s", "from": "1774785600000", "user": "ann"}, NOW)[
        "from"
    ] == datetime(2026, 3, 29, 12, 0, tzinfo=UTC)
    assert parse_params(params, {"site": "s", "from": "2026-03-01T10:00:00+02:00"}, NOW)["from"].hour == 10
    for query, name in [
        ({}, "site"),
        ({"site": "s", "limit": "0"}, "limit"),
        ({"site": "s", "limit": "ten"}, "limit"),
        ({"site": "s", "by": "week"}, "by"),
        ({"site": "s", "from": "last tuesday"}, "from"),
        ({"site": "s", "day": "2026-02-30"}, "day"),
        ({"site": "s", "sight": "x"}, "sight"),
    ]:
        err = bad(params, query)
        assert err.name == name and str(err).startswith(f"{name}: ")


def test_exactly_one_of_several_parameters() -> None:
    check = exactly_one("user", "item")
    check({"user": 1, "item": None})
    with pytest.raises(BadParam, match="exactly one of user, item"):
        check({"user": None, "item": None})
    with pytest.raises(BadParam) as err:
        check({"user": 1, "item": 2})
    assert err.value.name == "item"


@pytest.mark.parametrize(
    ("span", "interval_ms", "max_points", "by"),
    [
        (timedelta(hours=6), 30_000, 1000, "minute"),
        (timedelta(hours=6), 120_000, 1000, "hour"),  # minutes would be finer than Grafana asked
        (timedelta(days=2), 1_000, 500, "hour"),  # 2,881 minutes are more points than the panel has
        (timedelta(days=30), 3_600_000, 1000, "hour"),
        (timedelta(days=30), 3_600_000, 500, "day"),
        (timedelta(days=700), 86_400_000, 1000, "day"),
        (timedelta(days=7000), 86_400_000, 1000, "month"),
    ],
)
def test_grafana_resolution_follows_interval_and_points(
    span: timedelta, interval_ms: int, max_points: int, by: str
) -> None:
    assert choose_by(NOW - span, NOW, interval_ms, max_points) == by


def test_grafana_resolution_refuses_what_no_bucket_bounds() -> None:
    with pytest.raises(BadParam, match="longer than the API serves"):
        choose_by(NOW - timedelta(days=60 * 366), NOW, 86_400_000, 1000)


def test_grafana_query_body_is_checked_field_by_field() -> None:
    body: dict[str, Any] = {
        "range": {"from": "2026-03-29T06:00:00.000Z", "to": "2026-03-29T12:00:00.000Z"},
        "intervalMs": 30_000,
        "maxDataPoints": 800,
        "targets": [
            {"target": "hits", "refId": "A", "payload": {"site": "a.test"}},
            {"target": "hits", "refId": "B", "data": {"site": "b.test", "page": "/x"}},  # older plugin field
            {"target": "hits", "refId": "C", "hide": True},
            {"target": "visitors", "refId": "D", "payload": {"site": "a.test"}},
        ],
    }
    q = parse_panel_query(body, NOW)
    assert q.by == "minute" and q.end - q.start == timedelta(hours=6)
    assert [(t.ref, t.site, t.page, t.metric) for t in q.targets] == [
        ("A", "a.test", None, "hits"),
        ("B", "b.test", "/x", "hits"),
        ("D", "a.test", None, "visitors"),
    ]
    assert visitor_by(q.by) == "hour" and visitor_by("day") == "day"
    for broken, name in [
        ([], "body"),
        ({**body, "range": None}, "range"),
        ({**body, "range": {"from": "soon", "to": "later"}}, "range.from"),
        ({**body, "targets": [{"target": "cpu", "payload": {"site": "a"}}]}, "targets[0].target"),
        ({**body, "targets": [{"target": "hits", "payload": {}}]}, "targets[0].payload.site"),
        ({**body, "targets": [{}] * 21}, "targets"),
        ({**body, "intervalMs": "fast"}, "intervalMs"),
    ]:
        with pytest.raises(BadParam) as err:
            parse_panel_query(broken, NOW)
        assert err.value.name == name


def test_openapi_document_of_every_kind_is_valid() -> None:
    settings = Settings()
    routes = [r for k in load_kinds(settings.kinds) for r in k.api_routes(settings)]
    for guarded in (False, True):
        doc = openapi_document(routes, guarded, "1.0")
        validate(doc)  # type: ignore[arg-type]
        assert ("security" in doc) is guarded
    paths = [r.path for r in routes]
    assert len({(r.method, r.path) for r in routes}) == len(routes)
    assert {"/api/hits", "/api/pages", "/api/props", "/api/sites", "/grafana/query"} <= set(paths)
    assert doc["paths"]["/grafana/query"]["post"]["requestBody"]["required"] is True
    assert "/grafana/" not in doc["paths"]  # an alias, served but not listed


def test_a_route_without_parameters_still_documents_its_errors() -> None:
    async def handler(db: Any, a: Any) -> Any:
        return []

    doc = openapi_document([Route("/api/x", "x", (), handler)], False, "1")
    assert set(doc["paths"]["/api/x"]["get"]["responses"]) == {"200", "400", "500", "503"}


def test_requests_wait_for_a_bounded_number_of_read_slots_then_503_with_retry_after() -> None:
    """serve_concurrency reads at once; the waiting queue is bounded; each request has one deadline."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from pipeline.serve.server import build_app

    release = asyncio.Event()
    running = []

    async def slow(db: Any, a: Any) -> Any:
        running.append(1)
        await release.wait()
        return {"ok": True}

    route = Route("/api/slow", "waits", (), slow)
    config = Settings(serve_concurrency=2, query_timeout=30.0)

    async def scenario() -> list[tuple[int, str | None]]:
        client = TestClient(TestServer(build_app(config, None, [route])))  # type: ignore[arg-type]
        await client.start_server()
        try:
            calls = [asyncio.create_task(client.get("/api/slow")) for _ in range(2 + 16 + 3)]
            while len(running) < 2:
                await asyncio.sleep(0.01)
            for _ in range(50):  # let every request reach the queue
                await asyncio.sleep(0.01)
            assert len(running) == 2  # the others wait for a slot
            release.set()
            out = []
            for c in calls:
                r = await c
                out.append((r.status, r.headers.get("Retry-After")))
            return out
        finally:
            await client.close()

    got = asyncio.run(scenario())
    assert got.count((200, None)) == 18  # 2 running + 16 queued (8 per slot)
    assert got.count((503, "1")) == 3  # past the queue: refused at once, told when to retry


def test_one_deadline_per_request_answers_503() -> None:
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from pipeline.serve.server import build_app

    async def never(db: Any, a: Any) -> Any:
        await asyncio.Event().wait()

    config = Settings(query_timeout=0.2)

    async def scenario() -> tuple[int, str | None, Any]:
        app = build_app(config, None, [Route("/api/never", "hangs", (), never)])  # type: ignore[arg-type]
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            r = await client.get("/api/never")
            return r.status, r.headers.get("Retry-After"), await r.json()
        finally:
            await client.close()

    status, retry, body = asyncio.run(scenario())
    assert (status, retry) == (503, "1") and "deadline" in body["error"]


def test_an_unforeseen_exception_is_a_500_with_a_request_id_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server bug is answered 500, never blamed on the client with a 400."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from pipeline.serve.server import build_app

    async def broken(db: Any, a: Any) -> Any:
        return None + 1  # type: ignore[operator]

    async def scenario() -> tuple[int, str | None, Any]:
        app = build_app(Settings(), None, [Route("/api/broken", "a bug", (), broken)])  # type: ignore[arg-type]
        client = TestClient(TestServer(app))
        await client.start_server()
        try:
            r = await client.get("/api/broken")
            return r.status, r.headers.get("X-Request-Id"), await r.json()
        finally:
            await client.close()

    with caplog.at_level("ERROR", logger="pipeline.serve.server"):
        status, rid, body = asyncio.run(scenario())
    assert status == 500 and rid and body["request_id"] == rid and "TypeError" in body["error"]
    lines = [r.getMessage() for r in caplog.records if rid in r.getMessage()]
    assert len(lines) == 1 and "TypeError" in lines[0] and "\n" not in lines[0], lines


def test_host_names_served_by_bind_address() -> None:
    from pipeline.serve.middleware import allowed_hosts, host_name

    assert allowed_hosts(Settings()) == {"127.0.0.1", "localhost", "::1"}
    assert allowed_hosts(Settings(serve_bind="0.0.0.0")) is None
    assert allowed_hosts(Settings(serve_bind="10.0.0.5")) == {"10.0.0.5", "127.0.0.1", "localhost", "::1"}
    assert allowed_hosts(Settings(serve_bind="0.0.0.0", serve_hosts=("Stats.Example",))) == {"stats.example"}
    assert [host_name(h) for h in ("a.b:80", "[::1]:8900", "::1", "LOCALHOST", "")] == [
        "a.b",
        "::1",
        "::1",
        "localhost",
        "",
    ]


def test_tokens_never_reach_the_log() -> None:
    import logging

    from pipeline.serve.middleware import RedactTokens

    record = logging.LogRecord(
        "aiohttp.server",
        logging.ERROR,
        "",
        0,
        "Error handling request: %s",
        ("Authorization: Bearer abc\x01def",),
        None,
    )
    assert RedactTokens("s3cret").filter(record)
    assert "abc" not in record.getMessage() and "***" in record.getMessage()
    record = logging.LogRecord("x", logging.INFO, "", 0, "header was %r", ("s3cret",), None)
    RedactTokens("s3cret").filter(record)
    assert "s3cret" not in record.getMessage()


def test_serve_refuses_a_short_token_beyond_loopback_and_says_how_to_make_one() -> None:
    """The README's `PREAGG_SERVE_TOKEN=...` served every interface behind `...`."""
    from pipeline.serve.middleware import check_exposure
    from pipeline.settings import SettingsError

    with pytest.raises(SettingsError, match=r"3 characters.*at least 16.*secrets"):
        check_exposure(Settings(serve_bind="0.0.0.0", serve_token="..."))
    check_exposure(Settings(serve_bind="0.0.0.0", serve_token="x" * 16))
    check_exposure(Settings(serve_bind="127.0.0.1", serve_token="..."))  # this machine only
    check_exposure(Settings(serve_bind="0.0.0.0", serve_token=""))  # no token: a warning, as before


def test_probes_and_metrics_answer_any_host_the_api_only_the_listed_ones() -> None:
    """The kubelet probes with ``Host: <pod IP>:<port>`` and Prometheus scrapes the same: a
    421 there would keep serve unready and restart it for ever."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from pipeline.serve.server import build_app

    async def answer(db: Any, a: Any) -> Any:
        return {"ok": True}

    class Db:
        async def command(self, name: str) -> dict[str, int]:
            return {"ok": 1}

    config = Settings(serve_hosts=("preagg-serve", "preagg-serve.analytics.svc"))
    route = Route("/api/here", "answers", (), answer)

    async def scenario() -> dict[tuple[str, str], int]:
        client = TestClient(TestServer(build_app(config, Db(), [route])))  # type: ignore[arg-type]
        await client.start_server()
        try:
            out = {}
            for host in ("10.244.1.7:8900", "preagg-serve.analytics.svc:8900"):
                for path in ("/health", "/health/ready", "/health/live", "/metrics", "/api/here", "/"):
                    out[(host, path)] = (await client.get(path, headers={"Host": host})).status
            return out
        finally:
            await client.close()

    got = asyncio.run(scenario())
    for path in ("/health", "/health/ready", "/health/live", "/metrics"):
        assert got[("10.244.1.7:8900", path)] == 200, path
    assert got[("10.244.1.7:8900", "/api/here")] == got[("10.244.1.7:8900", "/")] == 421
    assert got[("preagg-serve.analytics.svc:8900", "/api/here")] == 200
