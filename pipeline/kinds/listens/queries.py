"""The listens kind's queries, declared once: ``preagg query top-tags|heard`` and ``/api/top-tags|heard``."""

from __future__ import annotations

from pipeline.core.params import Param
from pipeline.core.queries import Query, indexed

USER = Param("user", "user id (digits: an integer id)", "id", required=True)

QUERIES = indexed(
    Query(
        "top-tags",
        "/api/top-tags",
        "A user's tags by estimated distinct songs over the last N days (HyperLogLog)",
        (
            USER,
            Param("days", "window in days, today included", "integer", default="7", minimum=1, maximum=7),
            Param("limit", "most tags", "integer", default="10", minimum=1, maximum=1000),
            Param("today", "the window's last UTC day (default: today)", "date"),
        ),
    ),
    Query(
        "heard",
        "/api/heard",
        "Whether a user has heard a song under a tag (Bloom filter: false positives possible)",
        (
            USER,
            Param("tag", "tag id", "id", required=True),
            Param("song", "song id", "id", required=True),
        ),
    ),
)
