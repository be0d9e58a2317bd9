"""Audit stored hits documents against the exact truth of what was produced.

Used by the chaos runs, the slow-store drill and the tests: every counter of every
daily and monthly document, pages' and sites' rollups, must equal the truth, and no
other document may exist.
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
from pipeline.kinds.hits.layout import HitsFields, TopFields, hits_fields
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


def sketches(f: object) -> tuple[str, ...]:
    """The fields of a document's names that are not hit counters: the unique visitors' sketches
    (``$max`` registers) and the numbers estimated from them (``visitor_count``), and the visits
    the visits stage counts (checked against visits' own truth: tests/integration/test_visits.py)."""
    names = ("visitors", "hourly_visitors", "visitor_count", "visitors_exact", "visits")
    return tuple(name for name in (getattr(f, n, None) for n in names) if name)


async def audit_hits(
    db: AsyncDatabase[dict[str, Any]], truth: Mapping[Key, int], fields: HitsFields, limit: int = 20
) -> list[str]:
    """Mismatches between stored hits documents and ``truth`` (empty list: exact)."""
    expected = {(u.collection, u.id): u.inc for u in plan_hits(truth, fields)}
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    r = fields.rollups
    for f in (fields.daily, fields.monthly, r.daily, r.monthly, r.top_daily, r.top_monthly):
        async for doc in db[f.collection].find():
            key = (f.collection, doc["_id"])
            seen.add(key)
            # a sealed list's two facts (seal.py) are not counters
            facts = (f.sealed, f.below) if isinstance(f, TopFields) else ()
            stored = dict(counters(doc, ("_id", f.metadata, MARKS, *facts, *sketches(f))))
            meta = doc.get(f.metadata)
            if not isinstance(meta, dict) or f.date not in meta or f.site not in meta:
                # what every query by (site, date) filters on: a document without it is never read
                problems.append(f"{key}: metadata incomplete {meta!r}")
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


async def audit_rollups(db: AsyncDatabase[dict[str, Any]], fields: HitsFields, limit: int = 20) -> list[str]:
    """Mismatches between each site rollup and the sum of its site's page documents (any zones).

    Every counter but the capped hits must equal the sum over the page documents of
    the same site and local day (month), unless pages of that day were capped (then
    only the rollup has their hits); each top-pages document must add up to its
    rollup's total.
    """
    r = fields.rollups
    problems: list[str] = []
    for pages_f, site_f, top_f in (
        (fields.daily, r.daily, r.top_daily),
        (fields.monthly, r.monthly, r.top_monthly),
    ):
        want: dict[tuple[str, Any], dict[str, int]] = {}
        async for doc in db[pages_f.collection].find():
            m = doc[pages_f.metadata]
            acc = want.setdefault((m[pages_f.site], m[pages_f.date]), {})
            for path, n in counters(doc, ("_id", pages_f.metadata, MARKS, *sketches(pages_f))):
                acc[path] = acc.get(path, 0) + n
        tops: dict[str, int] = {}
        async for doc in db[top_f.collection].find():
            tops[doc["_id"]] = sum(int(n) for n in (doc.get(top_f.pages) or {}).values())
        seen = set()
        async for doc in db[site_f.collection].find():
            m = doc[site_f.metadata]
            key = (m[site_f.site], m[site_f.date])
            seen.add(key)
            capped_field = getattr(site_f, "capped", "-")
            capped = int(doc.get(capped_field, 0) or 0)
            stored = dict(counters(doc, ("_id", site_f.metadata, MARKS, capped_field, *sketches(site_f))))
            if tops.get(doc["_id"], 0) != stored.get(site_f.total, 0):
                problems.append(
                    f"{top_f.collection} {key}: {tops.get(doc['_id'])}, total {stored.get(site_f.total)}"
                )
            if capped:
                continue  # hits of pages without documents: only the rollup has them
            pages = want.get(key, {})
            for path in sorted(set(stored) | set(pages)):
                if stored.get(path, 0) != pages.get(path, 0):
                    got, sum_ = stored.get(path, 0), pages.get(path, 0)
                    problems.append(f"{site_f.collection} {key} {path}: rollup {got}, pages {sum_}")
        problems.extend(f"{site_f.collection} {key}: missing" for key in sorted(set(want) - seen, key=str))
    return problems[:limit] + ([f"... and {len(problems) - limit} more"] if len(problems) > limit else [])
