"""The relation documents: per user a Bloom filter of its items, per item one of its users."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.bloom import BloomSpec
from pipeline.core.fields import SCHEMAS, FieldMode, Index, field_names

#: ``schemas/relations``: the event JSON Schema and these documents' field names.
FOLDER = SCHEMAS / "relations"


@dataclass(frozen=True)
class RelationSides:
    """Names and filter sizes of both sides."""

    users: dict[str, str]
    items: dict[str, str]
    #: Filters of users hold items; filters of items hold users.
    user_spec: BloomSpec
    item_spec: BloomSpec


def relation_sides(user_n: int, item_n: int, p: float, mode: FieldMode = "compact") -> RelationSides:
    """Both sides' names (``mode``) and filter sizes for capacity ``n``, rate ``p``."""
    return RelationSides(
        field_names(FOLDER, "relation_users", mode),
        field_names(FOLDER, "relation_items", mode),
        BloomSpec.for_capacity(user_n, p),
        BloomSpec.for_capacity(item_n, p),
    )


def indexes(mode: FieldMode) -> list[Index]:
    """None: filters are read by ``_id`` or scanned with ``$bitsAllSet`` (docs/impressions-relations.md)."""
    return []
