"""The OpenAPI 3.1 document of the query API, built from the routes' declarations (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.core.routes import Route

ERROR_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "error": {"type": "string", "description": "what is wrong, naming the parameter"},
        "parameter": {"type": "string", "description": "the parameter at fault, when one is"},
        "request_id": {"type": "string", "description": "a 500's id, also in the server's log line"},
    },
    "required": ["error"],
}


PENDING_SCHEMA: Mapping[str, Any] = {
    "type": ["object", "null"],
    "description": "what of the kind's topic still waits to be counted (null: not looked at yet)",
    "properties": {
        "complete": {"type": "boolean", "description": "nothing waits: the answer holds every event sent"},
        "messages": {
            "type": "integer",
            "description": "messages waiting (at most: offsets are not contiguous)",
        },
        "partitions": {"type": "integer", "description": "partitions with messages waiting"},
        "seconds": {
            "type": ["number", "null"],
            "description": "about how long until counted (null: unknown)",
        },
        "stalled": {
            "type": "boolean",
            "description": "messages wait and no flush for a minute: no worker counts",
        },
        "last_flush_age": {"type": ["number", "null"], "description": "seconds since the group's last flush"},
        "topic": {"type": "string"},
        "checked": {"type": "number", "description": "seconds since the server looked"},
    },
}


def _responses(
    route_returns: Mapping[str, Any], guarded: bool, envelope: bool = False, names_site: bool = False
) -> dict[str, Any]:
    err = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    rows: dict[str, Any] = dict(route_returns)
    if envelope:
        wrapped = {
            "type": "object",
            "properties": {"rows": rows, "pending": {"$ref": "#/components/schemas/Pending"}},
            "required": ["rows", "pending"],
        }
        rows = {"oneOf": [rows, wrapped]}
    out: dict[str, Any] = {
        "200": {
            "description": "the rows; with envelope=true, the rows and what waits to be counted "
            "(headers Preagg-Complete and Preagg-Pending-Messages say it either way)",
            "content": {"application/json": {"schema": rows}},
        },
        "400": {"description": "a bad parameter (named in the answer)", **err},
        "500": {"description": "a server bug (the answer and the log carry its request id)", **err},
        "503": {"description": "the store did not answer within the deadline", **err},
    }
    if guarded:
        out["401"] = {"description": "missing or wrong bearer token", **err}
    if names_site:
        out["404"] = {
            "description": "an unknown site (neither hits nor settings, none waiting to be counted); the "
            "answer names the known sites closest to it",
            **err,
        }
    return out


def _operation(route: Route, guarded: bool) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": route.summary,
        "operationId": route.path.strip("/").removeprefix("api/").replace("-", "_").replace("/", "_"),
        "tags": [route.tag] if route.tag else [],
        "parameters": [
            {
                "name": p.name,
                "in": "query",
                "required": p.required,
                "description": p.help,
                "schema": p.schema(),
            }
            for p in route.params
        ],
        "responses": _responses(
            route.returns,
            guarded,
            any(p.name == "envelope" for p in route.params),
            route.tag == "hits" and any(p.name == "site" for p in route.params),
        ),
    }
    if route.limits:
        op["x-preagg-limits"] = dict(route.limits)
    if route.method == "POST":
        body = {"type": "object", "description": "as the route's summary says"}
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    return op


def openapi_document(routes: Iterable[Route], guarded: bool, version: str) -> dict[str, Any]:
    routes = list(routes)
    """The document: every listed route as an operation on its path.

    ``guarded``: a bearer token is required (``PREAGG_SERVE_TOKEN``), so every
    operation carries the security requirement and a 401 answer.
    """
    paths: dict[str, Any] = {}
    for r in routes:
        if r.listed:
            paths.setdefault(r.path, {})[r.method.lower()] = _operation(r, guarded)
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "preagg query API",
            "version": version,
            "description": "Read-only JSON over the pre-aggregated documents: the same rows as "
            "`preagg query ... --json`. Times are UTC.",
        },
        "paths": paths,
        "components": {"schemas": {"Error": dict(ERROR_SCHEMA), "Pending": dict(PENDING_SCHEMA)}},
    }
    kinds = sorted({r.tag for r in routes if r.tag})
    if kinds:
        answer = {
            "type": "object",
            "properties": {k: {"$ref": "#/components/schemas/Pending"} for k in kinds},
        }
        paths["/api/pending"] = {
            "get": {
                "summary": "What of each kind's topic still waits to be counted",
                "operationId": "pending",
                "tags": [],
                "parameters": [],
                "responses": _responses(answer, guarded),
            }
        }
    if guarded:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
