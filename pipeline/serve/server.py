"""``preagg serve``: the query API, its OpenAPI document, the dashboard and Grafana's endpoints over HTTP.

A process of its own (aiohttp), apart from the workers: it only reads, so it scales
with analysts, not with ingestion, and its load never delays a flush. Every MongoDB
read has the ``query_timeout`` deadline; a store that does not answer in time is a
503, logged, never a hung request.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from aiohttp import web
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from pipeline.kinds import load_kinds
from pipeline.serve.openapi import openapi_document
from pipeline.serve.params import BadParam, parse_params
from pipeline.serve.routes import Route
from pipeline.settings import Settings

log = logging.getLogger("preagg.serve")

Db = AsyncDatabase[dict[str, Any]]
Endpoint = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The dashboard's files (plain HTML, CSS and JavaScript: no build step, nothing fetched from elsewhere).
DASHBOARD = Path(__file__).parent / "dashboard"
STATIC = {"/": "index.html", "/dashboard.js": "dashboard.js", "/dashboard.css": "dashboard.css"}
CONTENT_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
#: The dashboard loads nothing but its own files and this server's JSON.
CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _error(status: int, message: str, parameter: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if parameter is not None:
        body["parameter"] = parameter
    return _json(body, status)


def all_routes(settings: Settings) -> list[Route]:
    """Every kind's endpoints (``PREAGG_KINDS``)."""
    return [r for kind in load_kinds(settings.kinds) for r in kind.api_routes(settings)]


def _guarded(path: str) -> bool:
    return path.startswith(("/api/", "/grafana"))


def _middlewares(settings: Settings) -> list[Any]:
    token = settings.serve_token.encode()
    origins = set(settings.serve_cors)

    @web.middleware
    async def cors(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        allowed = origin is not None and (origin in origins or "*" in origins)
        if request.method == "OPTIONS" and allowed:
            response: web.StreamResponse = web.Response(status=204)
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
            response.headers["Access-Control-Max-Age"] = "600"
        else:
            response = await handler(request)
        if allowed:
            response.headers["Access-Control-Allow-Origin"] = str(origin)
            response.headers["Vary"] = "Origin"
        return response

    @web.middleware
    async def auth(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        if token and _guarded(request.path):
            given = request.headers.get("Authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token):
                return _error(401, "a bearer token is required (Authorization: Bearer <PREAGG_SERVE_TOKEN>)")
        return await handler(request)

    @web.middleware
    async def errors(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        try:
            return await handler(request)
        except BadParam as exc:
            return _error(400, str(exc), exc.name)
        except web.HTTPException as exc:  # no such endpoint or method: JSON too, pointing at the list
            if not _guarded(request.path) or exc.status not in (404, 405):
                raise
            return _error(
                exc.status, f"{exc.reason}: {request.method} {request.path} (endpoints: /openapi.json)"
            )
        except (PyMongoError, TimeoutError) as exc:
            log.warning("%s %s: store error %s: %s", request.method, request.path_qs, type(exc).__name__, exc)
            return _error(503, f"the store did not answer ({type(exc).__name__}); try again")

    return [cors, auth, errors]


def _endpoint(route: Route, db: Db) -> Endpoint:
    async def handle(request: web.Request) -> web.StreamResponse:
        if route.method == "POST":
            args: dict[str, Any] = {"body": await _body(request)}
        else:
            args = parse_params(route.params, request.query, datetime.now(UTC))
        if route.check is not None:
            route.check(args)
        return _json(await route.handler(db, args))

    return handle


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BadParam("body", "is not JSON") from None
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


def build_app(settings: Settings, db: Db, routes: Iterable[Route] | None = None) -> web.Application:
    """The whole HTTP application over ``db``."""
    routes = list(all_routes(settings) if routes is None else routes)
    app = web.Application(middlewares=_middlewares(settings))
    doc = openapi_document(routes, bool(settings.serve_token), package_version())

    async def openapi(request: web.Request) -> web.StreamResponse:
        return _json(doc)

    async def health(request: web.Request) -> web.StreamResponse:
        await db.command("ping")
        return _json({"status": "ok"})

    app.add_routes([web.route(r.method, r.path, _endpoint(r, db)) for r in routes])
    app.add_routes([web.get("/openapi.json", openapi), web.get("/health", health)])
    app.add_routes([web.get(path, _static(name)) for path, name in STATIC.items()])
    return app


async def serve(settings: Settings, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; ``ready`` gets the dashboard's URL once the port is bound."""
    from pipeline.store.client import mongo_client

    client = mongo_client(settings.mongo_url or "", timeout=settings.query_timeout)
    runner = web.AppRunner(build_app(settings, client[settings.db]), access_log=log)
    await runner.setup()
    site = web.TCPSite(runner, settings.serve_bind, settings.serve_port)
    await site.start()
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
        await runner.cleanup()
        await client.close()
