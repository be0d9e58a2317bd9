"""The relations kind's HTTP endpoint: items related to a user, or users related to an item."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.params import one_of
from pipeline.core.routes import ID_SCHEMA, Route
from pipeline.kinds.relations.layout import relation_sides
from pipeline.kinds.relations.queries import QUERIES
from pipeline.kinds.relations.query import related_items, related_users
from pipeline.kinds.relations.settings import KEY
from pipeline.settings import Settings


def routes(settings: Settings) -> list[Route]:
    """``/api/related`` (as ``preagg query related --json``, cut at ``limit``)."""

    rs = settings.of(KEY)
    sides = relation_sides(rs.user_capacity, rs.item_capacity, rs.fpr, settings.schema)

    async def related(db: Any, a: Mapping[str, Any]) -> Any:
        if one_of(a, ("user", "item")) == "user":
            found = await related_items(db, a["user"], sides)
        else:
            found = await related_users(db, a["item"], sides)
        return found[: a["limit"]]

    return [QUERIES["related"].route(related, {"type": "array", "items": dict(ID_SCHEMA)}, "relations")]
