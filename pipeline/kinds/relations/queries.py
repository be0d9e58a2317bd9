"""The relations kind's query, declared once: ``preagg query related`` and ``/api/related``."""

from __future__ import annotations

from pipeline.core.params import Param, exactly_one
from pipeline.core.queries import Query, indexed

QUERIES = indexed(
    Query(
        "related",
        "/api/related",
        "Items whose Bloom filter holds a user (user), or users whose filter holds an item (item)",
        (
            Param("user", "items related to this user", "id"),
            Param("item", "users related to this item", "id"),
            Param("limit", "most ids", "integer", default="1000", minimum=1, maximum=100_000),
        ),
        exactly_one("user", "item"),
    )
)
