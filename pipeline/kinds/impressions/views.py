"""The impressions views analysts query: impressions per user and item, and per item and day.

A pair's count is one document; an item's counts are one document per source partition
(each written by that partition's one writer), so the item views add them up.
"""

from __future__ import annotations

from pipeline.core.fields import FieldMode, View
from pipeline.kinds.impressions.layout import impression_fields
from pipeline.store.view_exprs import DAY, ID, INT, compact_day_text, number, path


def views(mode: FieldMode) -> list[View]:
    """``impressions_user_items`` and ``impressions_item_days`` in field-name ``mode``."""
    f = impression_fields(mode)
    pairs, daily = f.pairs, f.daily
    return [
        View(
            "impressions_user_items",
            pairs["collection"],
            (
                {
                    "$project": {
                        "_id": 0,
                        "user": path(pairs["user"]),
                        "item": path(pairs["item"]),
                        "impressions": number(path(pairs["count"])),
                    }
                },
            ),
            "one row per user and item: how many times the user was shown the item",
            (
                ("user", ID, "the user"),
                ("item", ID, "the item"),
                ("impressions", INT, "impressions of the item to the user"),
            ),
        ),
        View(
            "impressions_item_days",
            daily["collection"],
            (
                {
                    "$group": {
                        "_id": {"d": path(daily["day"]), "i": path(daily["item"])},
                        "n": {"$sum": number(path(daily["count"]))},
                    }
                },
                {
                    "$project": {
                        "_id": 0,
                        "date": compact_day_text("$_id.d"),
                        "item": "$_id.i",
                        "impressions": "$n",
                    }
                },
            ),
            "one row per UTC day and item: its impressions, every source partition's together",
            (
                ("date", DAY, "the UTC day, YYYY-MM-DD"),
                ("item", ID, "the item"),
                ("impressions", INT, "impressions that day"),
            ),
        ),
    ]
