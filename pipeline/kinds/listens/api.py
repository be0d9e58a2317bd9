"""The listens kind's HTTP endpoints: a user's top tags, and "has this user heard that song"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.params import Param
from pipeline.core.routes import ID_SCHEMA, Route, rows_of
from pipeline.core.text import json_rows
from pipeline.kinds.listens.query import TOP_TAGS_HEADER, heard, shown_top_tags, top_tags
from pipeline.kinds.listens.settings import KEY
from pipeline.settings import Settings


def routes(settings: Settings) -> list[Route]:
    """``/api/top-tags`` and ``/api/heard`` (as ``preagg query top-tags --json`` and ``heard``)."""

    ls = settings.of(KEY)
    spec = ls.heard()
    user = Param("user", "user id (digits: an integer id)", "id", required=True)

    async def tags(db: Any, a: Mapping[str, Any]) -> Any:
        ranked = await top_tags(db, a["user"], a["days"], a["limit"], a["today"], settings.schema)
        return json_rows(shown_top_tags(ranked), TOP_TAGS_HEADER)

    async def was_heard(db: Any, a: Mapping[str, Any]) -> Any:
        return {"heard": await heard(db, a["user"], a["tag"], a["song"], spec, settings.schema)}

    return [
        Route(
            "/api/top-tags",
            "A user's tags by estimated distinct songs over the last N days (HyperLogLog)",
            (
                user,
                Param("days", "window in days, today included", "integer", default="7", minimum=1, maximum=7),
                Param("limit", "most tags", "integer", default="10", minimum=1, maximum=1000),
                Param("today", "the window's last UTC day (default: today)", "date"),
            ),
            tags,
            rows_of(("tag", ID_SCHEMA), ("distinct_songs", {"type": "number"})),
            None,
            "listens",
        ),
        Route(
            "/api/heard",
            "Whether a user has heard a song under a tag (Bloom filter: false positives possible)",
            (
                user,
                Param("tag", "tag id", "id", required=True),
                Param("song", "song id", "id", required=True),
            ),
            was_heard,
            {"type": "object", "properties": {"heard": {"type": "boolean"}}, "required": ["heard"]},
            None,
            "listens",
        ),
    ]
