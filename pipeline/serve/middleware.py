"""``preagg serve``'s guards around every request: the ``Host`` allow-list, CORS, the bearer
token, one deadline and a bounded number of reads at once, and every failure answered as JSON.

A bad request is a 4xx naming what is wrong; the store away is a 503 with ``Retry-After``;
an exception nobody foresaw is a 500 with a request id and one log line (a bug to fix,
never the client's fault). The token is compared in constant time and never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import traceback
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pymongo.errors import PyMongoError

from pipeline.core.params import BadParam, NotFound
from pipeline.settings import Settings, SettingsError
from pipeline.store.client import Db

log = logging.getLogger("preagg.serve")

Endpoint = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_answer(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def json_error(status: int, message: str, parameter: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if parameter is not None:
        body["parameter"] = parameter
    return json_answer(body, status)


def guarded(path: str) -> bool:
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


def host_guard(hosts: frozenset[str] | None) -> Any:
    """421 for a ``Host`` not served (DNS rebinding), but on the probes and ``/metrics``."""

    @web.middleware
    async def headers(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        if (
            hosts is not None
            and request.path not in ANY_HOST
            and host_name(request.headers.get("Host", "")) not in hosts
        ):
            response: web.StreamResponse = json_error(
                421, "this Host is not served (PREAGG_SERVE_HOSTS lists the names a proxy forwards)", "Host"
            )
        else:
            response = await handler(request)
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    return headers


def bounded(settings: Settings, slots: asyncio.Semaphore, db: Db | None) -> Any:
    """One deadline per request and at most ``serve_concurrency`` of them reading at once."""
    deadline = settings.query_timeout
    waiting = [0]
    max_waiting = 8 * settings.serve_concurrency

    @web.middleware
    async def bound(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        if not guarded(request.path) and request.path not in ("/health", "/health/ready"):
            return await handler(request)
        if waiting[0] >= max_waiting:
            return busy("too many requests are waiting for the store")
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
            return busy(store_unreachable(db) or f"no answer within the request's deadline ({deadline:g} s)")

    return bound


def cors(origins: set[str]) -> Any:
    """Cross-origin reads for the configured origins (``PREAGG_SERVE_CORS``)."""

    @web.middleware
    async def allow(request: web.Request, handler: Endpoint) -> web.StreamResponse:
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

    return allow


def auth(token: bytes) -> Any:
    """The bearer token on the API and Grafana's endpoints (compared in constant time)."""

    @web.middleware
    async def check(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        if token and guarded(request.path):
            given = request.headers.get("Authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token):
                return json_error(
                    401, "a bearer token is required (Authorization: Bearer <PREAGG_SERVE_TOKEN>)"
                )
        return await handler(request)

    return check


def errors(db: Db | None) -> Any:
    """Every failure as JSON: 404 and 400 naming the parameter, 503 for the store, 500 for a bug."""

    @web.middleware
    async def answer(request: web.Request, handler: Endpoint) -> web.StreamResponse:
        try:
            return await handler(request)
        except NotFound as exc:
            return json_error(404, str(exc), exc.name)
        except BadParam as exc:
            return json_error(400, str(exc), exc.name)
        except web.HTTPException as exc:  # no such endpoint or method: JSON too, pointing at the list
            if not guarded(request.path) or exc.status not in (404, 405):
                raise
            return json_error(
                exc.status, f"{exc.reason}: {request.method} {request.path} (endpoints: /openapi.json)"
            )
        except (PyMongoError, TimeoutError) as exc:
            log.warning("%s %s: store error %s: %s", request.method, request.path, type(exc).__name__, exc)
            return busy(
                store_unreachable(db) or f"the store did not answer ({type(exc).__name__}); try again"
            )
        except Exception as exc:  # an exception no check foresaw is our bug, not the client's: a 500
            return server_error(request, exc)

    return answer


def middlewares(settings: Settings, slots: asyncio.Semaphore, db: Db | None = None) -> list[Any]:
    """In order: the Host guard, CORS, the token, the deadline and slots, the errors' answers."""
    return [
        host_guard(allowed_hosts(settings)),
        cors(set(settings.serve_cors)),
        auth(settings.serve_token.encode()),
        bounded(settings, slots, db),
        errors(db),
    ]


def server_error(request: web.Request, exc: Exception) -> web.Response:
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
    response = json_answer(body, 500)
    response.headers["X-Request-Id"] = rid
    return response


def busy(message: str) -> web.Response:
    response = json_error(503, message)
    response.headers["Retry-After"] = "1"
    return response
