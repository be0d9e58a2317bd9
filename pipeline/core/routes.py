"""What one read-only API endpoint is: its path, parameters, answer and handler (no HTTP here).

Pure declarations, below the kinds: each stream kind declares its endpoints next to
its CLI (``pipeline/kinds/<kind>/api.py``, returned by ``Kind.api_routes``); the
server (:mod:`pipeline.serve.server`) turns them into HTTP handlers and
:mod:`pipeline.serve.openapi` into the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline.core.params import Param

#: The database (a ``pipeline.store.client.Db``, typed loosely: this layer imports no
#: driver) and the parsed parameters (a ``POST``'s JSON body as ``body``) → the JSON
#: answer (lists and dicts of plain values).
Handler = Callable[[Any, Mapping[str, Any]], Awaitable[Any]]

#: The argument the server adds for a tagged route: how many events of its kind wait to be
#: counted, -1 while it does not know yet (a name no query parameter can take), so that a
#: handler can tell "not counted yet" from "not there".
WAITING = "$waiting"


@dataclass(frozen=True)
class Route:
    """One endpoint of the query API: a ``GET`` with query parameters, or a ``POST`` of a JSON body."""

    path: str
    summary: str
    params: tuple[Param, ...]
    handler: Handler
    #: JSON Schema of the answer (OpenAPI).
    returns: Mapping[str, Any] = field(default_factory=dict)
    #: Rules between parameters (a range's end after its start...): raise ``BadParam``.
    check: Callable[[Mapping[str, Any]], None] | None = None
    #: OpenAPI tag: the kind the endpoint belongs to.
    tag: str = ""
    #: ``GET`` (query parameters) or ``POST`` (a JSON object, handed over as ``body``).
    method: Literal["GET", "POST"] = "GET"
    #: In the OpenAPI document (an alias such as a trailing-slash path is not).
    listed: bool = True
    #: Bounds beyond each parameter's own (``x-preagg-limits`` in OpenAPI: the dashboard reads them).
    limits: Mapping[str, Any] = field(default_factory=dict)


def rows_of(*props: tuple[str, Mapping[str, Any]]) -> dict[str, Any]:
    """JSON Schema of an array of objects with these properties (all required)."""
    return {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {name: dict(schema) for name, schema in props},
            "required": [name for name, _ in props],
        },
    }


#: JSON Schema of a user, item or tag id: an integer or a string, as sent.
ID_SCHEMA: Mapping[str, Any] = {"oneOf": [{"type": "integer"}, {"type": "string"}]}
