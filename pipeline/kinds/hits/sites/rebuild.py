"""``preagg rollups rebuild``: a site's rollups computed from its page documents.

For data written before site rollups existed (or a rollup an operator mistrusts):
each local day's page documents are summed into the site's daily rollup and top
pages, each month's into its monthly ones, and each is *replaced* with the sums. Running it again
gives the same documents (idempotent); progress is recorded per site in
``preagg_meta`` (``rollups/<site>``), so a run cut short resumes where it stopped.

Unique visitors are the union of the pages' sketches, not a sum
(:mod:`.rebuild_sketches`). Top pages are exact here (the day's pages sorted by hits,
filled to the budget), the rest ``(other)``. A rollup workers have written keeps its idempotency marks, so a
flush under way is still recognised; rebuild a day while workers write it and the
increments between the read and the replacement are lost: rebuild days workers no
longer write (docs/rollups.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.marks import MARKS
from pipeline.core.times import midnight
from pipeline.kinds.hits.layout import HitsFields, TopFields, register_fields, site_daily_id, site_monthly_id
from pipeline.kinds.hits.sites.caps import OTHER_PAGE
from pipeline.kinds.hits.sites.rebuild_sketches import Sketches
from pipeline.kinds.hits.sites.seal import exact_list
from pipeline.store.meta import META_COLLECTION


@dataclass(frozen=True)
class RebuildResult:
    """What one run wrote."""

    days: int
    months: int
    page_documents: int
    first: date | None
    last: date | None


def progress_id(site: str) -> str:
    """``preagg_meta`` ``_id`` of a site's rebuild progress."""
    return f"rollups/{site}"


def _add(into: dict[str, Any], doc: Mapping[str, Any]) -> None:
    """Add every integer counter of ``doc`` into ``into`` (nested maps as nested maps)."""
    for k, v in doc.items():
        if isinstance(v, Mapping):
            _add(into.setdefault(k, {}), v)
        elif isinstance(v, int) and not isinstance(v, bool):
            into[k] = into.get(k, 0) + v


def top_pages(totals: Counter[str], budget: int, top: TopFields) -> dict[str, Any]:
    """The exact list (:func:`seal.exact_list`), sealed when it leaves pages out (a complete list
    is exact as it is, as the workers' seal has it)."""
    total = sum(totals.values())
    pages, below = exact_list(totals, budget, total)
    if OTHER_PAGE not in pages:
        return {top.pages: pages}
    return {top.pages: pages, top.sealed: total, top.below: below}


async def rebuild_rollups(
    db: AsyncDatabase[dict[str, Any]],
    fields: HitsFields,
    site: str,
    first: date | None,
    top_bytes: int,
    report: Callable[[str], None] = lambda _: None,
) -> RebuildResult:
    """Rebuild ``site``'s rollups from ``first`` on (``None``: where the last run stopped, or the start)."""
    fd, fm = fields.daily, fields.monthly
    rd, rm = fields.rollups.daily, fields.rollups.monthly
    td, tm = fields.rollups.top_daily, fields.rollups.top_monthly
    registers = register_fields(fields.mode)
    meta = db[META_COLLECTION]
    if first is None:
        done = await meta.find_one({"_id": progress_id(site)})
        first = done["through"].date() if done else date.min
    since = midnight(max(first, date(1, 1, 2)))
    flt = {f"{fd.metadata}.{fd.site}": site, f"{fd.metadata}.{fd.date}": {"$gte": since}}
    days = sorted(d.date() for d in await db[fd.collection].distinct(f"{fd.metadata}.{fd.date}", flt))
    pages = 0
    months: list[date] = []
    for day in days:
        sums: dict[str, Any] = {}
        totals: Counter[str] = Counter()
        meta_fields: dict[str, Any] = {fd.date: midnight(day), fd.site: site}
        written: datetime | None = None  # the latest page's: the rollup is as recent as its pages
        day_flt = {f"{fd.metadata}.{fd.site}": site, f"{fd.metadata}.{fd.date}": midnight(day)}
        sketches = Sketches(fd.visitors, fd.hourly_visitors)
        async for doc in db[fd.collection].find(day_flt, {MARKS: 0}):
            sketches.take(fd.collection, doc.pop("_id"), doc)
            m = doc.pop(fd.metadata)
            for k in (fd.start, fd.zone):
                if k in m:
                    meta_fields[k] = m[k]
            totals[m[fd.page]] += int(doc.get(fd.total, 0))
            _add(sums, doc)
            w = doc.get(fd.written)
            if isinstance(w, datetime) and (written is None or w > written):
                written = w
            pages += 1
        if written is not None:
            sums[rd.written] = written
        doc = {rd.metadata: meta_fields, **sums}
        doc_id = site_daily_id(day, site)
        await sketches.write(db, registers, doc, rd.collection, doc_id)
        await _replace(db, rd.collection, doc_id, f"{rd.metadata}.{rd.site}", site, doc)
        top = {td.metadata: {td.date: midnight(day), td.site: site}, **top_pages(totals, top_bytes, td)}
        await _replace(db, td.collection, doc_id, f"{td.metadata}.{td.site}", site, top)
        month = day.replace(day=1)
        if not months or months[-1] != month:
            months.append(month)
        await meta.update_one({"_id": progress_id(site)}, {"$set": {"through": midnight(day)}}, upsert=True)
        report(f"{day.isoformat()}: {sum(totals.values())} hits of {len(totals)} pages")
    for month in months:
        sums = {}
        totals = Counter()
        m_flt = {f"{fm.metadata}.{fm.site}": site, f"{fm.metadata}.{fm.date}": midnight(month)}
        sketches = Sketches(fm.visitors, None)
        async for doc in db[fm.collection].find(m_flt, {MARKS: 0}):
            sketches.take(fm.collection, doc.pop("_id"), doc)
            m = doc.pop(fm.metadata)
            totals[m[fm.page]] += int(doc.get(fm.total, 0))
            _add(sums, doc)
        doc = {rm.metadata: {fm.date: midnight(month), fm.site: site}, **sums}
        doc_id = site_monthly_id(month, site)
        await sketches.write(db, registers, doc, rm.collection, doc_id)
        await _replace(db, rm.collection, doc_id, f"{rm.metadata}.{rm.site}", site, doc)
        top = {tm.metadata: {tm.date: midnight(month), tm.site: site}, **top_pages(totals, top_bytes, tm)}
        await _replace(db, tm.collection, doc_id, f"{tm.metadata}.{tm.site}", site, top)
        report(f"{month:%Y-%m}: {sum(totals.values())} hits of {len(totals)} pages")
    return RebuildResult(len(days), len(months), pages, days[0] if days else None, days[-1] if days else None)


async def _replace(
    db: AsyncDatabase[dict[str, Any]],
    collection: str,
    doc_id: str,
    shard_key: str,
    site: str,
    doc: dict[str, Any],
) -> None:
    """Replace one rollup with ``doc``, keeping the idempotency marks workers left on it.

    The filter carries the shard key (``shard_key``: the site), as an upsert on a
    sharded collection must.
    """
    coll = db[collection]
    old = await coll.find_one({"_id": doc_id, shard_key: site}, {MARKS: 1})
    doc = {"_id": doc_id, **doc}
    if old and MARKS in old:
        doc[MARKS] = old[MARKS]
    await coll.replace_one({"_id": doc_id, shard_key: site}, doc, upsert=True)
