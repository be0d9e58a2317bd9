"""The impression documents: field names and indexes.

* pairs ``{_id: <int64 pair key>, u, i, c}``;
* items ``{_id: <item>, c}``;
* items by day ``{_id: "YYYYMMDD|<item>", d: "YYYYMMDD", i, c}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.fields import SCHEMAS, FieldMode, Index, field_names

#: ``schemas/impressions``: the event JSON Schema and these documents' field names.
FOLDER = SCHEMAS / "impressions"


@dataclass(frozen=True)
class ImpressionFields:
    """Stored names of the three impression collections (schemas/impressions/fields.json)."""

    pairs: dict[str, str]
    items: dict[str, str]
    daily: dict[str, str]


def impression_fields(mode: FieldMode = "compact") -> ImpressionFields:
    """Field names from ``schemas/impressions/fields.json`` in ``mode``."""
    return ImpressionFields(
        field_names(FOLDER, "impression_pairs", mode),
        field_names(FOLDER, "impression_items", mode),
        field_names(FOLDER, "impression_items_daily", mode),
    )


def indexes(mode: FieldMode) -> list[Index]:
    """Pairs by user and by item; items and item-days by count (top N without a scan)."""
    f = impression_fields(mode)
    pairs = f.pairs["collection"]
    return [
        Index(pairs, ((f.pairs["user"], 1),), "user"),
        Index(pairs, ((f.pairs["item"], 1),), "item"),
        Index(f.items["collection"], ((f.items["count"], -1),), "count"),
        Index(f.daily["collection"], ((f.daily["day"], 1), (f.daily["count"], -1)), "day_count"),
    ]
