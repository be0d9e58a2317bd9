"""The impressions kind's query, declared once: ``preagg query impressions`` and ``/api/impressions``."""

from __future__ import annotations

from pipeline.core.params import Param, exactly_one
from pipeline.core.queries import Query, indexed

#: Most rows one answer holds (a popular item's users can be millions).
MAX_ROWS = 10_000

QUERIES = indexed(
    Query(
        "impressions",
        "/api/impressions",
        "Items a user has seen (user), users who saw an item (item) or the N most viewed items (top)",
        (
            Param("user", "items this user has seen, with counts", "id"),
            Param("item", "users who saw this item, with counts", "id"),
            Param("top", "the N most viewed items", "integer", minimum=1, maximum=MAX_ROWS),
            Param("day", "with top: that UTC day", "date"),
            Param(
                "limit",
                "with user or item: most rows",
                "integer",
                default="1000",
                minimum=1,
                maximum=MAX_ROWS,
            ),
        ),
        exactly_one("user", "item", "top"),
    )
)
