"""Unique visitors of a site or page over a range of its local days: unions of the stored sketches.

A day's (hour's) visitors are the sketch of its daily document (``visitors``,
``hourly_visitors.<h>``); a month's, its monthly document's when the range covers the whole
month, else the union of its days in range. ``by=total`` is the union over the whole range:
whole months read one monthly document each, the other days one daily document each, so a
30-day site chart reads at most one document per day (the site's rollups). Each answer says
whether it is exact (:func:`pipeline.core.uniques.estimate`).

With the default daily salt the same person has another hash each day, so a range longer
than a day counts them once a day: its figure is the sum of its days' visitors at most
(docs/visitors.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.core.fields import FieldMode
from pipeline.core.times import midnight
from pipeline.core.uniques import Estimate, estimate, overflowed
from pipeline.kinds.hits.layout import (
    HitsFields,
    daily_id,
    monthly_id,
    read_fields,
    register_fields,
    site_filter,
)
from pipeline.kinds.hits.limits import VISITOR_BUCKETS
from pipeline.kinds.hits.query import by_ids, month_spans
from pipeline.kinds.hits.registers import read_registers, register_ids


@dataclass(frozen=True)
class VisitorRow:
    """One bucket's unique visitors (its start, local time), whether that figure is exact, and
    its page views (every hit, crawlers' too), read from the same documents."""

    t: datetime
    visitors: int
    exact: bool
    hits: int = 0
    #: Local days the bucket covers: with the daily salt, a bucket of several days counts a
    #: person once a day (its figure is the sum of its days' visitors).
    days: int = 1

    def sum_of_days(self, daily_salt: bool) -> bool:
        """Whether the figure is the sum of daily visitors rather than distinct people."""
        return daily_salt and self.days > 1


#: One stored sketch: the document's collection and ``_id``, the holder's path, the holder.
Held = tuple[str, Any, str, Mapping[str, Any] | None]


async def _holders(
    db: AsyncDatabase[dict[str, Any]],
    fields: HitsFields,
    site: str,
    page: str | None,
    monthly: bool,
    first: date,
    last: date,
    hourly: bool = False,
) -> dict[date, dict[str, Any]]:
    """The sketches of a site's (page's) daily or monthly documents from ``first`` to ``last``, by date."""
    f = read_fields(fields, page)
    doc = f.monthly if monthly else f.daily
    proj: dict[str, Any] = {f"{doc.metadata}.{doc.date}": 1, doc.visitors: 1, doc.total: 1}
    if hourly:
        proj[f.daily.hourly_visitors] = 1
        proj[f.daily.hourly] = 1
    flt = site_filter(doc, site, page, midnight(first), midnight(last))
    out: dict[date, dict[str, Any]] = {}
    async for d in db[doc.collection].find(flt, proj):
        out[d[doc.metadata][doc.date].date()] = d
    return out


async def estimates(
    db: AsyncDatabase[dict[str, Any]], groups: Sequence[Sequence[Held]], mode: FieldMode
) -> list[Estimate]:
    """Each group's union: the holders, and the registers of those that have them, read by ``_id``
    in one pass for all groups."""
    ids = (i for g in groups for c, d, path, h in g if overflowed(h) for i in register_ids(c, d, path, h))
    found = await read_registers(db, register_fields(mode), ids)
    return [
        estimate(
            [h for *_, h in g],
            [found.get(i) for c, d, path, h in g if overflowed(h) for i in register_ids(c, d, path, h)],
        )
        for g in groups
    ]


def _exact(group: Sequence[Held]) -> bool:
    return not any(overflowed(h) for *_, h in group)


async def visitor_rows(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    page: str | None,
    first: date,
    last: date,
    by: str,
    fields: HitsFields,
) -> list[VisitorRow]:
    """Unique visitors per ``by`` bucket (``hour``, ``day``, ``month``) of ``first``..``last``, zero-filled,
    or one row for the whole range (``total``)."""
    if by not in VISITOR_BUCKETS:
        raise ValueError(f"by must be one of {', '.join(VISITOR_BUCKETS)}")
    f = read_fields(fields, page)
    fd, fm = f.daily, f.monthly
    v, vh, total, hourly = fd.visitors, fd.hourly_visitors, fd.total, fd.hourly
    months = month_spans(first, last)
    rows: list[tuple[datetime, list[Held], int]] = []

    def held(coll: str, doc: Mapping[str, Any], path: str, holder: Mapping[str, Any] | None) -> Held:
        return coll, doc.get("_id"), path, holder

    if by in ("hour", "day"):
        days = await _holders(db, fields, site, page, False, first, last, hourly=by == "hour")
        d = first
        while d <= last:
            doc = days.get(d, {})
            if by == "day":
                rows.append((midnight(d), [held(fd.collection, doc, v, doc.get(v))], int(doc.get(total, 0))))
            else:
                hours, counts = doc.get(vh) or {}, doc.get(hourly) or {}
                # A local day of 25 hours (a DST change) has an hour 24.
                n = 25 if "24" in hours or "24" in counts else 24
                rows.extend(
                    (
                        midnight(d) + timedelta(hours=h),
                        [held(fd.collection, doc, f"{vh}.{h}", hours.get(str(h)))],
                        int(counts.get(str(h), 0)),
                    )
                    for h in range(n)
                )
            d += timedelta(days=1)
    else:
        whole = [lo for lo, _, w in months if w]
        month_docs = await _holders(db, fields, site, page, True, whole[0], whole[-1]) if whole else {}
        # A whole month whose sketch is an estimate is read as its days when each of them is exact
        # (a month of small days, in registers once its writer passed the explicit bound): up to
        # 31 more documents for an exact answer instead of an estimate.
        inexact = {lo for lo in whole if overflowed(month_docs.get(lo, {}).get(fm.visitors))}
        partial = [(lo, hi) for lo, hi, w in months if not w or lo in inexact]
        day_docs: dict[date, dict[str, Any]] = {}
        for lo, hi in partial:
            day_docs.update(await _holders(db, fields, site, page, False, lo, hi))
        per_month: list[tuple[date, list[Held], int]] = []
        for lo, hi, w in months:
            docs = [doc for d, doc in day_docs.items() if lo <= d <= hi]
            days_held = [held(fd.collection, doc, v, doc.get(v)) for doc in docs]
            if w and not (lo in inexact and _exact(days_held)):
                doc = month_docs.get(lo, {})
                per_month.append(
                    (
                        lo,
                        [held(fm.collection, doc, fm.visitors, doc.get(fm.visitors))],
                        int(doc.get(fm.total, 0)),
                    )
                )
            else:
                per_month.append((lo, days_held, sum(int(doc.get(total, 0)) for doc in docs)))
        if by == "month":
            rows = [(midnight(lo.replace(day=1)), g, n) for lo, g, n in per_month]
        else:
            rows = [
                (midnight(first), [h for _, g, _ in per_month for h in g], sum(n for _, _, n in per_month))
            ]
    found = await estimates(db, [g for _, g, _ in rows], fields.mode)
    spans = {lo.replace(day=1): (hi - lo).days + 1 for lo, hi, _ in months}

    def span(t: datetime) -> int:
        if by in ("hour", "day"):
            return 1
        return (last - first).days + 1 if by == "total" else spans[t.date()]

    return [VisitorRow(t, e.value, e.exact, n, span(t)) for (t, _, n), e in zip(rows, found, strict=True)]


async def page_visitors(
    db: AsyncDatabase[dict[str, Any]],
    site: str,
    pages: list[str],
    first: date,
    last: date,
    fields: HitsFields,
) -> dict[str, Estimate]:
    """Unique visitors of each of ``pages`` over ``first``..``last`` (top pages' visitors column):
    each whole month's monthly document, each other day's daily document, read by ``_id``."""
    fd, fm = fields.daily, fields.monthly
    months = month_spans(first, last)
    wanted: dict[str, list[Held]] = {p: [] for p in pages}
    whole = [lo for lo, _, w in months if w]
    days = [lo + timedelta(days=i) for lo, hi, w in months if not w for i in range((hi - lo).days + 1)]
    for coll, ids, doc_fields in (
        (fm.collection, [monthly_id(m, site, p) for p in pages for m in whole], fm),
        (fd.collection, [daily_id(d, site, p) for p in pages for d in days], fd),
    ):
        proj = {f"{doc_fields.metadata}.{doc_fields.page}": 1, doc_fields.visitors: 1}
        site_path = f"{doc_fields.metadata}.{doc_fields.site}"
        async for d in by_ids(db[coll], ids, site_path, site, proj):
            page = d[doc_fields.metadata][doc_fields.page]
            if page in wanted:
                wanted[page].append((coll, d["_id"], doc_fields.visitors, d.get(doc_fields.visitors)))
    found = await estimates(db, list(wanted.values()), fields.mode)
    return dict(zip(wanted, found, strict=True))
