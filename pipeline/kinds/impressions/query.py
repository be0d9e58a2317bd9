"""Impression queries: items of a user, users of an item, most viewed items (overall or per day).

Each is one indexed read of pre-aggregated documents: pairs by user or item, the
per-item totals by count, the per-item-day totals by (day, count).
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.fields import FieldMode
from pipeline.core.ids import Id
from pipeline.kinds.impressions.layout import impression_fields

Counts = list[tuple[Id, int]]


async def _pairs(
    db: AsyncDatabase[dict[str, Any]], by: str, value: Id, other: str, limit: int, mode: FieldMode
) -> Counts:
    """Pairs whose ``by`` field is ``value``: (``other`` id, count), most first."""
    f = impression_fields(mode).pairs
    cur = db[f["collection"]].find({f[by]: value}, {f[other]: 1, f["count"]: 1, "_id": 0})
    rows = [(d[f[other]], d[f["count"]]) async for d in cur]
    rows.sort(key=lambda r: -r[1])
    return rows[:limit] if limit else rows


async def items_of_user(
    db: AsyncDatabase[dict[str, Any]], user: Id, limit: int = 0, mode: FieldMode = "compact"
) -> Counts:
    """Every item ``user`` has seen, with counts, most seen first."""
    return await _pairs(db, "user", user, "item", limit, mode)


async def users_of_item(
    db: AsyncDatabase[dict[str, Any]], item: Id, limit: int = 0, mode: FieldMode = "compact"
) -> Counts:
    """Every user who saw ``item``, with counts, most first."""
    return await _pairs(db, "item", item, "user", limit, mode)


async def top_items(
    db: AsyncDatabase[dict[str, Any]], n: int, day: str | None = None, mode: FieldMode = "compact"
) -> Counts:
    """The ``n`` most viewed items overall, or on ``day`` (``YYYYMMDD`` or ``YYYY-MM-DD``).

    One aggregation: an item's documents (one per source partition) summed, then sorted;
    a day's documents are found through the (day, item) index.
    """
    fields = impression_fields(mode)
    f = fields.items if day is None else fields.daily
    stages: list[dict[str, Any]] = [] if day is None else [{"$match": {f["day"]: day.replace("-", "")}}]
    stages += [
        {"$group": {"_id": f"${f['item']}", "n": {"$sum": f"${f['count']}"}}},
        {"$sort": {"n": -1, "_id": 1}},
        {"$limit": n},
    ]
    return [(d["_id"], d["n"]) async for d in await db[f["collection"]].aggregate(stages)]
