"""The relations views analysts query: how many relation events each user and item had.

Who is related to whom lives in Bloom filters, which only ``preagg query related``
(membership) reads; the views show what a MongoDB client can read as numbers: the
events added per user, and per item over its source partitions' filters.
"""

from __future__ import annotations

from pipeline.core.fields import FieldMode, View, field_names
from pipeline.kinds.relations.layout import FOLDER
from pipeline.store.view_exprs import ID, INT, number, path


def views(mode: FieldMode) -> list[View]:
    """``relations_users`` and ``relations_items`` in field-name ``mode``."""
    users = field_names(FOLDER, "relation_users", mode)
    items = field_names(FOLDER, "relation_items", mode)
    return [
        View(
            "relations_users",
            users["collection"],
            ({"$project": {"_id": 0, "user": "$_id", "relations": number(path(users["count"]))}},),
            "one row per user: relation events added (a pair sent twice counts twice)",
            (("user", ID, "the user"), ("relations", INT, "relation events of the user")),
        ),
        View(
            "relations_items",
            items["collection"],
            (
                {"$group": {"_id": path(items["item"]), "n": {"$sum": number(path(items["count"]))}}},
                {"$project": {"_id": 0, "item": "$_id", "relations": "$n"}},
            ),
            "one row per item: relation events added, every source partition's together",
            (("item", ID, "the item"), ("relations", INT, "relation events of the item")),
        ),
    ]
