"""Audit stored hits documents against the exact truth of what was produced.

Used by the chaos runs, the slow-store drill and the tests: every counter of every
daily and monthly document must equal the truth, and no other document may exist.
The expected documents come from :func:`pipeline.kinds.hits.aggregate.plan_hits` applied
to the whole truth at once (the planner is unit-tested on its own), so any event
lost or counted twice anywhere shows up as a named mismatch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.marks import MARKS
from pipeline.kinds.hits.aggregate import Key, plan_hits
from pipeline.kinds.hits.layout import HitsFields, hits_fields
from pipeline.settings import Settings
from pipeline.store.client import mongo_client


def counters(doc: Mapping[str, Any], skip: tuple[str, ...], prefix: str = "") -> Iterator[tuple[str, int]]:
    """Dotted paths and values of every integer counter of a document."""
    for k, v in doc.items():
        if not prefix and k in skip:
            continue
        path = f"{prefix}{k}"
        if isinstance(v, Mapping):
            yield from counters(v, skip, f"{path}.")
        elif isinstance(v, int) and not isinstance(v, bool):
            yield path, v


async def audit_hits(
    db: AsyncDatabase[dict[str, Any]], truth: Mapping[Key, int], fields: HitsFields, limit: int = 20
) -> list[str]:
    """Mismatches between stored hits documents and ``truth`` (empty list: exact)."""
    expected = {(u.collection, u.id): u.inc for u in plan_hits(truth, fields)}
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    for f in (fields.daily, fields.monthly):
        async for doc in db[f.collection].find():
            key = (f.collection, doc["_id"])
            seen.add(key)
            stored = dict(counters(doc, ("_id", f.metadata, MARKS)))
            want = expected.get(key)
            if want is None:
                problems.append(f"{key}: unexpected document {stored}")
                continue
            for path in sorted(set(stored) | set(want)):
                if stored.get(path, 0) != want.get(path, 0):
                    problems.append(f"{key} {path}: stored {stored.get(path, 0)}, truth {want.get(path, 0)}")
    problems.extend(f"{key}: missing" for key in sorted(set(expected) - seen))
    return problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])


async def audit_database(settings: Settings, truth: Mapping[Key, int], timeout: float = 600.0) -> list[str]:
    """:func:`audit_hits` on the database ``settings`` name, through a client of its own."""
    client = mongo_client(settings.mongo_url or "", timeout=timeout)
    try:
        return await audit_hits(client[settings.db], truth, hits_fields(settings.schema))
    finally:
        await client.close()
