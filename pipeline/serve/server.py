"""``preagg serve``: the query API, its OpenAPI document, the dashboard and Grafana's endpoints over HTTP.

A process of its own (aiohttp), apart from the workers: it only reads, so it scales
with analysts, not with ingestion, and its load never delays a flush. Every request
is hostile until parsed: a bad parameter or body is a 400 naming it; an exception nobody foresaw is a
500 with a request id and one log line (a bug to fix, never the client's fault).
Each request has one deadline (``query_timeout``) covering its wait for one of
``serve_concurrency`` read slots and all its reads: past it the answer is 503 with
``Retry-After``, logged, never a hung request or an unbounded pile of reads on the
store. The ``Host`` header is checked (DNS rebinding) and bodies must be JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from pipeline.core.params import BadParam, Param, parse_params
from pipeline.core.routes import WAITING, Route
from pipeline.kinds import load_kinds
from pipeline.serve.middleware import (
    RedactTokens,
    allowed_hosts,
    check_exposure,
    json_answer,
    middlewares,
)
from pipeline.serve.openapi import openapi_document
from pipeline.settings import Settings, SettingsError
from pipeline.store.client import Db

log = logging.getLogger("preagg.serve")

Endpoint = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The dashboard's files (plain HTML, CSS and JavaScript: no build step, nothing fetched from elsewhere).
DASHBOARD = Path(__file__).parent / "dashboard"
STATIC = {"/": "index.html", "/dashboard.js": "dashboard.js", "/dashboard.css": "dashboard.css"}
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
#: The dashboard loads nothing but its own files and this server's JSON.
CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


#: Every ``GET`` endpoint's envelope switch: the rows alone (the default, as clients and
#: Grafana's Infinity read them), or the rows with what still waits to be counted.
ENVELOPE = Param(
    "envelope",
    'true: answer {"rows": the rows, "pending": what of the kind\'s topic still waits to be counted}',
    "boolean",
    default="false",
)


class Pending(Protocol):
    """What waits to be counted on one topic (:class:`pipeline.ops.pending.Pending`)."""

    @property
    def messages(self) -> int: ...

    def as_json(self) -> dict[str, Any]: ...


class Watch(Protocol):
    """Who tells what waits to be counted (:class:`pipeline.ops.pending.PendingWatch`, wired by the CLI)."""

    def of(self, topic: str) -> Pending | None: ...

    def exposition(self) -> bytes:
        """The group's position in Prometheus' text format (``/metrics``)."""
        ...

    async def forever(self) -> None: ...


def all_routes(settings: Settings) -> list[Route]:
    """Every kind's endpoints (``PREAGG_KINDS``), tagged with their kind; a ``GET`` takes ``envelope``."""
    return [
        replace(r, tag=r.tag or kind.name, params=(*r.params, ENVELOPE) if r.method == "GET" else r.params)
        for kind in load_kinds(settings.kinds)
        for r in kind.api_routes(settings)
    ]


def _endpoint(route: Route, db: Db, waiting: Callable[[str], Pending | None]) -> Endpoint:
    async def handle(request: web.Request) -> web.StreamResponse:
        if route.method == "POST":
            args: dict[str, Any] = {"body": await _body(request)}
        else:
            args = parse_params(route.params, request.query, datetime.now(UTC))
        if route.check is not None:
            route.check(args)
        pending = waiting(route.tag) if route.tag else None
        # not looked at yet (-1): as undecided as events waiting, so never "unknown site"
        args[WAITING] = pending.messages if pending is not None else -1
        rows = await route.handler(db, args)
        if args.get("envelope"):
            response = json_answer({"rows": rows, "pending": pending.as_json() if pending else None})
        else:
            response = json_answer(rows)
        if pending is not None:
            response.headers["Preagg-Complete"] = "false" if pending.messages else "true"
            response.headers["Preagg-Pending-Messages"] = str(pending.messages)
        return response

    return handle


async def _body(request: web.Request) -> dict[str, Any]:
    """The JSON object a ``POST`` carries: ``application/json`` only.

    Refusing ``text/plain`` and form bodies keeps browsers' CORS preflight in force:
    a page elsewhere cannot post to this API without it.
    """
    if request.content_type != "application/json":
        raise BadParam("Content-Type", f"{request.content_type!r}: bodies are application/json")
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadParam("body", "is not JSON") from None
    except RecursionError:
        raise BadParam("body", "is nested too deep") from None
    if not isinstance(body, dict):
        raise BadParam("body", "expected a JSON object")
    return body


def _static(name: str) -> Endpoint:
    path = DASHBOARD / name
    content_type = CONTENT_TYPES[path.suffix]

    async def handle(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=path.read_bytes(),
            content_type=content_type,
            charset="utf-8",
            headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"},
        )

    return handle


def package_version() -> str:
    """The installed preagg version (``0`` from a bare checkout)."""
    try:
        return version("preagg")
    except PackageNotFoundError:
        return "0"


def build_app(
    settings: Settings, db: Db, routes: Iterable[Route] | None = None, watch: Watch | None = None
) -> web.Application:
    """The whole HTTP application over ``db``; ``watch`` tells what waits to be counted per kind."""
    routes = list(all_routes(settings) if routes is None else routes)
    slots = asyncio.Semaphore(max(1, settings.serve_concurrency))
    app = web.Application(middlewares=middlewares(settings, slots, db))
    app.on_response_prepare.append(_server_header)
    doc = openapi_document(routes, bool(settings.serve_token), package_version())

    async def openapi(request: web.Request) -> web.StreamResponse:
        return json_answer(doc)

    async def health(request: web.Request) -> web.StreamResponse:
        """Readiness: the store answers (a 503 otherwise, through the error middleware)."""
        await db.command("ping")
        return json_answer({"status": "ok"})

    async def live(request: web.Request) -> web.StreamResponse:
        """Liveness: the process answers, whatever the store does (a restart would not fix it)."""
        return json_answer({"live": True})

    def waiting(kind: str) -> Pending | None:
        return watch.of(settings.topic(kind)) if watch is not None else None

    async def pending(request: web.Request) -> web.StreamResponse:
        """What waits to be counted, per kind (``null``: not looked at yet)."""
        kinds = sorted({r.tag for r in routes if r.tag})
        return json_answer({k: (p.as_json() if (p := waiting(k)) else None) for k in kinds})

    app.add_routes([web.route(r.method, r.path, _endpoint(r, db, waiting)) for r in routes])
    app.add_routes([web.get("/api/pending", pending)])
    app.add_routes([web.get("/openapi.json", openapi), web.get("/health", health)])

    async def metrics(request: web.Request) -> web.StreamResponse:
        """The group's position read from outside its consumers (empty without a watch)."""
        body = watch.exposition() if watch is not None else b""
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    app.add_routes([web.get("/health/ready", health), web.get("/health/live", live)])
    app.add_routes([web.get("/metrics", metrics)])
    app.add_routes([web.get(path, _static(name)) for path, name in STATIC.items()])
    return app


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    """No version in ``Server``: it tells an attacker which advisories apply."""
    response.headers["Server"] = "preagg"


async def serve(
    settings: Settings,
    ready: Callable[[str], None] | None = None,
    watch: Callable[[Db], Watch] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; ``ready`` gets the dashboard's URL once the port is bound.

    ``watch``: makes, over the store, what tells each answer what waits to be counted.
    """
    from pipeline.store.client import mongo_client

    check_exposure(settings)
    redact = RedactTokens(settings.serve_token)
    for name in ("aiohttp.server", "aiohttp.access", "aiohttp.web", "preagg.serve"):
        logging.getLogger(name).addFilter(redact)
    if allowed_hosts(settings) is None and not settings.serve_token:
        log.warning(
            "bound to every address with no token nor PREAGG_SERVE_HOSTS: anyone reaching it reads it"
        )
    client = mongo_client(settings.mongo_url or "", timeout=settings.query_timeout)
    watcher = watch(client[settings.db]) if watch is not None else None
    runner = web.AppRunner(build_app(settings, client[settings.db], watch=watcher), access_log=log)
    await runner.setup()
    site = web.TCPSite(runner, settings.serve_bind, settings.serve_port)
    try:
        await site.start()
    except OSError as exc:  # a busy port or an address not on this machine: one line, not a traceback
        await runner.cleanup()
        await client.close()
        raise SettingsError(
            f"cannot listen on {settings.serve_bind}:{settings.serve_port}: {exc.strerror or exc} "
            "(another process holds the port? choose one with --port or PREAGG_SERVE_PORT)"
        ) from None
    watching = asyncio.create_task(watcher.forever() if watcher is not None else asyncio.Event().wait())
    port = runner.addresses[0][1]
    url = f"http://{settings.serve_bind}:{port}/"
    (ready or print)(url)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
        await runner.cleanup()
        await client.close()
