"""The listens kind's HTTP endpoints: a user's top tags, and "has this user heard that song"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.routes import ID_SCHEMA, Route, rows_of
from pipeline.core.text import json_rows
from pipeline.kinds.listens.queries import QUERIES
from pipeline.kinds.listens.query import TOP_TAGS_HEADER, heard, shown_top_tags, top_tags
from pipeline.kinds.listens.settings import KEY
from pipeline.settings import Settings


def routes(settings: Settings) -> list[Route]:
    """``/api/top-tags`` and ``/api/heard`` (as ``preagg query top-tags --json`` and ``heard``)."""

    ls = settings.of(KEY)
    spec = ls.heard()

    async def tags(db: Any, a: Mapping[str, Any]) -> Any:
        ranked = await top_tags(db, a["user"], a["days"], a["limit"], a["today"], settings.schema)
        return json_rows(shown_top_tags(ranked), TOP_TAGS_HEADER)

    async def was_heard(db: Any, a: Mapping[str, Any]) -> Any:
        return {"heard": await heard(db, a["user"], a["tag"], a["song"], spec, settings.schema)}

    return [
        QUERIES["top-tags"].route(
            tags, rows_of(("tag", ID_SCHEMA), ("distinct_songs", {"type": "number"})), "listens"
        ),
        QUERIES["heard"].route(
            was_heard,
            {"type": "object", "properties": {"heard": {"type": "boolean"}}, "required": ["heard"]},
            "listens",
        ),
    ]
