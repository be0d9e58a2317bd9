"""Relation queries through the Bloom filters, evaluated by the server.

``related --user U``: items whose filter contains U (``$bitsAllSet`` per word of
U's bit positions over the item filters); ``--item I`` the other way round. No
index can serve ``$bitsAllSet``, so each query scans one side's filter documents;
a false positive is possible (rate about the configured ``relation_fpr`` while a
filter holds no more than its capacity), a false negative never.
"""

from __future__ import annotations

from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.bloom import contains_query
from pipeline.core.ids import Id
from pipeline.kinds.relations.layout import RelationSides


async def related_items(db: AsyncDatabase[dict[str, Any]], user: Id, sides: RelationSides) -> list[Id]:
    """Items whose filter (of users) contains ``user``."""
    f = sides.items
    query = contains_query(f["bits"], sides.item_spec, user)
    found = {d[f["item"]] async for d in db[f["collection"]].find(query, {f["item"]: 1, "_id": 0})}
    return sorted(found, key=str)


async def related_users(db: AsyncDatabase[dict[str, Any]], item: Id, sides: RelationSides) -> list[Id]:
    """Users whose filter (of items) contains ``item``."""
    f = sides.users
    query = contains_query(f["bits"], sides.user_spec, item)
    return sorted([d["_id"] async for d in db[f["collection"]].find(query, {"_id": 1})], key=str)
