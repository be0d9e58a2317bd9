"""The impression documents: field names and indexes.

* pairs ``{_id: <int64 pair key>, u, i, c}``;
* items ``{_id: "<item>|<partition>", i, c}``: per item and source partition;
* items by day ``{_id: "YYYYMMDD|<item>|<partition>", d: "YYYYMMDD", i, c}``.

Events are keyed by user, so every worker counts impressions of every item; one
document per item would be written by all of them and their transactions would
abort each other (WriteConflict). Per source partition, each item document has one
writer at a time; an item's total is the sum of its few documents.
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
    """Pairs by user and by item; an item's documents together; a day's item documents together."""
    f = impression_fields(mode)
    pairs = f.pairs["collection"]
    return [
        Index(pairs, ((f.pairs["user"], 1),), "user"),
        Index(pairs, ((f.pairs["item"], 1),), "item"),
        Index(f.items["collection"], ((f.items["item"], 1),), "item"),
        Index(f.daily["collection"], ((f.daily["day"], 1), (f.daily["item"], 1)), "day_item"),
    ]
