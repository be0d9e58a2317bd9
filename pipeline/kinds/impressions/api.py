"""The impressions kind's HTTP endpoint: counts by user, by item, or the top items."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.params import one_of
from pipeline.core.routes import ID_SCHEMA, Route
from pipeline.core.text import json_rows
from pipeline.kinds.impressions.queries import QUERIES
from pipeline.kinds.impressions.query import items_of_user, top_items, users_of_item
from pipeline.settings import Settings


def routes(settings: Settings) -> list[Route]:
    """``/api/impressions`` (as ``preagg query impressions --json``)."""
    mode = settings.schema

    async def impressions(db: Any, a: Mapping[str, Any]) -> Any:
        which = one_of(a, ("user", "item", "top"))
        if which == "user":
            return json_rows(await items_of_user(db, a["user"], a["limit"], mode), ("item", "count"))
        if which == "item":
            return json_rows(await users_of_item(db, a["item"], a["limit"], mode), ("user", "count"))
        day = a["day"].isoformat() if a["day"] is not None else None
        return json_rows(await top_items(db, a["top"], day, mode), ("item", "count"))

    row = {
        "type": "object",
        "properties": {"item": ID_SCHEMA, "user": ID_SCHEMA, "count": {"type": "integer"}},
        "required": ["count"],
    }
    return [QUERIES["impressions"].route(impressions, {"type": "array", "items": row}, "impressions")]
