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
import hmac
import json
import logging
import re
import signal
import traceback
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from pymongo.errors import PyMongoError

from pipeline.core.params import BadParam, NotFound, Param, parse_params
from pipeline.core.routes import WAITING, Route
from pipeline.kinds import load_kinds
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


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _error(status: int, message: str, parameter: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if parameter is not None:
        body["parameter"] = parameter
    return _json(body, status)


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


def _guarded(path: str) -> bool:
    return path.startswith(("/api/", "/grafana"))


#: Paths answered whatever the ``Host``: the kubelet's probes carry the pod's IP and
#: Prometheus scrapes the pod's address, names no allow-list can know in advance. They
#: carry no analyst's data, so DNS rebinding (what the allow-list stops) gains nothing.
ANY_HOST = frozenset({"/health", "/health/ready", "/health/live", "/metrics"})


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")


def allowed_hosts(settings: Settings) -> frozenset[str] | None:
    """The ``Host`` names served (lower case, no port); ``None``: any (bound to every address)."""
    if settings.serve_hosts:
        return frozenset(h.lower().strip("[]") for h in settings.serve_hosts)
    bind = settings.serve_bind.strip("[]")
    if bind in WILDCARDS:
        return None
    return frozenset({bind.lower(), *LOOPBACK_NAMES})


def host_name(header: str) -> str:
    """The name of a ``Host`` header without its port (``[::1]:8900`` → ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


#: Shortest bearer token ``preagg serve`` accepts when it binds beyond loopback.
MIN_TOKEN = 16
MAKE_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(24))'"


def check_exposure(settings: Settings) -> None:
    """Refuse to serve beyond loopback behind a token too short to resist guessing.

    The README's ``PREAGG_SERVE_TOKEN=...`` pasted as written served every interface behind
    the 3-character token ``...``. No token at all stays allowed (a container publishing
    the port on its host's loopback binds 0.0.0.0 inside) and is logged.
    """
    bind = settings.serve_bind.strip("[]")
    token = settings.serve_token
    if bind in LOOPBACK_NAMES or bind.startswith("127.") or not token:
        return
    if len(token) < MIN_TOKEN:
        raise SettingsError(
            f"PREAGG_SERVE_TOKEN is {len(token)} characters: bound to {bind}, preagg serve takes a token of "
            f"at least {MIN_TOKEN} random characters; make one with {MAKE_TOKEN}"
        )


class RedactTokens(logging.Filter):
    """Hides bearer tokens and the configured token in aiohttp's logs (a malformed
    ``Authorization`` header is logged whole when aiohttp refuses the request)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format: leave it to logging
            return True
        clean = _BEARER.sub(lambda m: m.group(1) + "***", text)
        if self.token:
            clean = clean.replace(self.token, "***")
        if clean != text:
            record.msg, record.args = clean, None
        return True


_BEARER = re.compile(r"""(authorization[\s:='"]+|\b(?:bearer|basic)\s+)[^'"\r\n]+""", re.IGNORECASE)


def store_unreachable(db: Db | None) -> str | None:
    """What to say when the store cannot be reached (``None``: the driver knows a server to read from).

    A dashboard showed "no answer within the request's deadline" with the store down:
    the reader must learn that the store, not the query, is the problem.
    """
    topology = getattr(getattr(db, "client", None), "topology_description", None)
    if topology is None:  # no driver behind it (a test's stand-in)
        return None
    if topology.has_readable_server():
        return None
    servers = topology.server_descriptions().values()
    where = ", ".join(f"{host}:{port}" for host, port in (s.address for s in servers)) or "?"
    errors = [str(s.error) for s in servers if s.error is not None]
    why = f": {errors[0][:200]}" if errors else ""
    return f"the store (MongoDB at {where}) does not answer{why}; is it running? (preagg services status)"


def _middlewares(settings: Settings, slots: asyncio.Semaphore, db: Db | None = None) -> list[Any]:
    token = settings.serve_token.encode()
    origins = set(settings.serve_cors)
    hosts = allowed_hosts(settings)
    deadline = settings.query_timeout
    waiting = [0]
    max_waiting = 8 * settings.serve_concurrency

    @web.middleware
    async def headers(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        if (
            hosts is not None
            and request.path not in ANY_HOST
            and host_name(request.headers.get("Host", "")) not in hosts
        ):
            response: web.StreamResponse = _error(
                421, "this Host is not served (PREAGG_SERVE_HOSTS lists the names a proxy forwards)", "Host"
            )
        else:
            response = await handler(request)
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @web.middleware
    async def bounded(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        """One deadline per request and at most ``serve_concurrency`` of them reading at once."""
        if not _guarded(request.path) and request.path not in ("/health", "/health/ready"):
            return await handler(request)
        if waiting[0] >= max_waiting:
            return _busy("too many requests are waiting for the store")
        waiting[0] += 1
        try:
            async with asyncio.timeout(deadline):
                try:
                    await slots.acquire()
                finally:
                    waiting[0] -= 1
                try:
                    return await handler(request)
                finally:
                    slots.release()
        except TimeoutError:
            log.warning("%s %s: no answer within %.0f s", request.method, request.path, deadline)
            return _busy(store_unreachable(db) or f"no answer within the request's deadline ({deadline:g} s)")

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
        except NotFound as exc:
            return _error(404, str(exc), exc.name)
        except BadParam as exc:
            return _error(400, str(exc), exc.name)
        except web.HTTPException as exc:  # no such endpoint or method: JSON too, pointing at the list
            if not _guarded(request.path) or exc.status not in (404, 405):
                raise
            return _error(
                exc.status, f"{exc.reason}: {request.method} {request.path} (endpoints: /openapi.json)"
            )
        except (PyMongoError, TimeoutError) as exc:
            log.warning("%s %s: store error %s: %s", request.method, request.path, type(exc).__name__, exc)
            return _busy(
                store_unreachable(db) or f"the store did not answer ({type(exc).__name__}); try again"
            )
        except Exception as exc:  # an exception no check foresaw is our bug, not the client's: a 500
            return _server_error(request, exc)

    return [headers, cors, auth, bounded, errors]


def _server_error(request: web.Request, exc: Exception) -> web.Response:
    """A 500 with a request id, and one log line with the same id, the exception and where it arose.

    Answering such a request with a 400 blamed the client for a server bug and hid it from
    the fuzz (which asserts no 5xx): the bug must surface, and be fixed where it is.
    """
    rid = uuid.uuid4().hex[:16]
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    log.error(
        "%s %s: request %s failed: %s: %s (at %s)",
        request.method,
        request.path,
        rid,
        type(exc).__name__,
        str(exc)[:300].replace("\n", " "),
        where,
    )
    body = {"error": f"internal error ({type(exc).__name__}); request id {rid}", "request_id": rid}
    response = _json(body, 500)
    response.headers["X-Request-Id"] = rid
    return response


def _busy(message: str) -> web.Response:
    response = _error(503, message)
    response.headers["Retry-After"] = "1"
    return response


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
            response = _json({"rows": rows, "pending": pending.as_json() if pending else None})
        else:
            response = _json(rows)
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
    app = web.Application(middlewares=_middlewares(settings, slots, db))
    app.on_response_prepare.append(_server_header)
    doc = openapi_document(routes, bool(settings.serve_token), package_version())

    async def openapi(request: web.Request) -> web.StreamResponse:
        return _json(doc)

    async def health(request: web.Request) -> web.StreamResponse:
        """Readiness: the store answers (a 503 otherwise, through the error middleware)."""
        await db.command("ping")
        return _json({"status": "ok"})

    async def live(request: web.Request) -> web.StreamResponse:
        """Liveness: the process answers, whatever the store does (a restart would not fix it)."""
        return _json({"live": True})

    def waiting(kind: str) -> Pending | None:
        return watch.of(settings.topic(kind)) if watch is not None else None

    async def pending(request: web.Request) -> web.StreamResponse:
        """What waits to be counted, per kind (``null``: not looked at yet)."""
        kinds = sorted({r.tag for r in routes if r.tag})
        return _json({k: (p.as_json() if (p := waiting(k)) else None) for k in kinds})

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
