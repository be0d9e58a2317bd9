"""The hits documents: field names, ``_id`` rules, the (site, page, date) filter and its index.

Documents follow the seed "Pre-Aggregated Reports": one per site/page/UTC day
(``hits_daily``) and one per site/page/UTC month (``hits_monthly``); both carry their
metadata (date, site, page) under one field and have one compound index on it.

Site rollups (``hits_site_daily``, ``hits_site_monthly``) have the same shape without
a page: the sum of a site's page documents, written by the same flush, so that a site
chart reads one document per day (month) whatever the number of pages; its top pages
per day and month are documents of their own (``hits_site_pages_daily``,
``hits_site_pages_monthly``, same ``_id``). See docs/rollups.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from typing import Any

from pipeline.core.fields import SCHEMAS, FieldMode, Index, ShardKey, check_mode, field_names, hashed_id
from pipeline.core.ids import escape_part

#: ``schemas/hits``: the event JSON Schema and these documents' field names.
FOLDER = SCHEMAS / "hits"

#: Per-site settings (zones, retention overrides): :mod:`pipeline.kinds.hits.sites.store`.
SITES_COLLECTION = "hits_sites"
#: The visitors' secret (:mod:`pipeline.kinds.hits.salt`).
SECRETS_COLLECTION = "hits_secrets"


def daily_id(day: date, site: str, page: str) -> str:
    """``_id`` of a daily document: ``YYYYMMDD/<site>/<page>`` (site escaped)."""
    return f"{day:%Y%m%d}/{escape_part(site)}/{page}"


def monthly_id(day: date, site: str, page: str) -> str:
    """``_id`` of a monthly document: ``YYYYMM/<site>/<page>`` (site escaped)."""
    return f"{day:%Y%m}/{escape_part(site)}/{page}"


def site_daily_id(day: date, site: str) -> str:
    """``_id`` of a site's daily rollup: ``YYYYMMDD/<site>`` (site escaped)."""
    return f"{day:%Y%m%d}/{escape_part(site)}"


def site_monthly_id(day: date, site: str) -> str:
    """``_id`` of a site's monthly rollup: ``YYYYMM/<site>`` (site escaped)."""
    return f"{day:%Y%m}/{escape_part(site)}"


@dataclass(frozen=True)
class DocFields:
    """Stored names both hits documents have."""

    collection: str
    metadata: str
    date: str
    site: str
    page: str
    total: str
    #: The period's unique visitors (a sketch: :mod:`pipeline.core.uniques`).
    visitors: str
    #: Its estimate as a plain number, and whether it is exact (:mod:`.visitor_counts`).
    visitor_count: str
    visitors_exact: str


@dataclass(frozen=True)
class DailyFields(DocFields):
    """Stored names of the daily hits document."""

    #: Unique visitors per hour of the day (hour → sketch).
    hourly_visitors: str
    start: str
    zone: str
    #: Hours in a zoned local day (23 or 25 on a DST change): what a reader zero-fills up to.
    length: str
    hourly: str
    minute: str
    props: str
    written: str


@dataclass(frozen=True)
class MonthlyFields(DocFields):
    """Stored names of the monthly hits document."""

    daily: str


@dataclass(frozen=True)
class SiteDailyFields(DailyFields):
    """Stored names of a site's daily rollup: a daily document's, and its capped hits."""

    capped: str
    #: Visits started that day (:mod:`pipeline.kinds.hits.visit_counts`).
    visits: str


@dataclass(frozen=True)
class SiteMonthlyFields(MonthlyFields):
    """Stored names of a site's monthly rollup: a monthly document's, and its visits."""

    visits: str


@dataclass(frozen=True)
class VisitPagesFields:
    """Stored names of a page's entries and exits of one day (visits)."""

    collection: str
    metadata: str
    date: str
    site: str
    page: str
    entries: str
    exits: str


@dataclass(frozen=True)
class VisitStateFields:
    """Stored names of the visits stage's state documents (a head and its parts)."""

    collection: str
    state: str
    upto: str
    data: str


@dataclass(frozen=True)
class TopFields:
    """Stored names of a site's top pages of one day or month."""

    collection: str
    metadata: str
    date: str
    site: str
    pages: str
    #: The sum of ``pages`` when a worker last made the list exact (:mod:`.sites.seal`).
    sealed: str
    #: At that moment, the most hits of a page not listed.
    below: str


@dataclass(frozen=True)
class RollupFields:
    """The site rollups' names: the series code reads them as it reads page documents.

    Top pages live in documents of their own (``top_daily``, ``top_monthly``): a series
    never reads them, so its cost stays the same whatever the number of pages.
    """

    daily: SiteDailyFields
    monthly: SiteMonthlyFields
    top_daily: TopFields
    top_monthly: TopFields
    mode: FieldMode = "compact"


@dataclass(frozen=True)
class HitsFields:
    """Every hits document's names, and the mode they come from, as one value to pass around."""

    daily: DailyFields
    monthly: MonthlyFields
    mode: FieldMode = "compact"
    sites: RollupFields | None = None

    @property
    def rollups(self) -> RollupFields:
        """The site rollups' names (always set by :func:`hits_fields`)."""
        if self.sites is None:
            raise ValueError("HitsFields without site rollups")
        return self.sites


@dataclass(frozen=True)
class RegisterFields:
    """Stored names of a busy visitor sketch's registers (:func:`register_id` names the document)."""

    collection: str
    registers: str
    blob: str
    parts: str


@cache
def register_fields(mode: FieldMode = "compact") -> RegisterFields:
    """Field names of the visitor registers' documents in ``mode``."""
    return RegisterFields(**field_names(FOLDER, "hits_visitor_registers", mode))


@cache
def visit_pages_fields(mode: FieldMode = "compact") -> VisitPagesFields:
    """Field names of the pages' entries and exits documents in ``mode``."""
    return VisitPagesFields(**field_names(FOLDER, "hits_visit_pages_daily", mode))


@cache
def visit_state_fields(mode: FieldMode = "compact") -> VisitStateFields:
    """Field names of the visits stage's state documents in ``mode``."""
    return VisitStateFields(**field_names(FOLDER, "hits_visit_state", mode))


def register_id(collection: str, doc_id: str | int, holder: str, writer: int | None = None) -> str:
    """``_id`` of the registers of one holder of one document: ``<collection>|<holder>|<_id>`` (the
    shared form), or ``<collection>|<holder>|<writer>|<_id>``: the partitions' document
    (``writer`` :data:`~pipeline.core.uniques.PARTS`, -2) or, written before it, one source
    partition's (a hits ``_id`` starts with a date and a slash: the forms never meet)."""
    if writer is None:
        return f"{collection}|{holder}|{doc_id}"
    return f"{collection}|{holder}|{writer}|{doc_id}"


def read_fields(fields: HitsFields, page: str | None) -> HitsFields:
    """What a chart reads: a page's documents, or for a whole site (``None``) its rollups."""
    if page is not None:
        return fields
    return HitsFields(fields.rollups.daily, fields.rollups.monthly, fields.mode, fields.sites)


@cache
def hits_fields(mode: FieldMode = "compact") -> HitsFields:
    """Field names of the hits documents in ``mode``."""
    return HitsFields(
        daily=DailyFields(**field_names(FOLDER, "hits_daily", mode)),
        monthly=MonthlyFields(**field_names(FOLDER, "hits_monthly", mode)),
        mode=check_mode(mode),
        sites=RollupFields(
            daily=SiteDailyFields(**field_names(FOLDER, "hits_site_daily", mode)),
            monthly=SiteMonthlyFields(**field_names(FOLDER, "hits_site_monthly", mode)),
            top_daily=TopFields(**field_names(FOLDER, "hits_site_pages_daily", mode)),
            top_monthly=TopFields(**field_names(FOLDER, "hits_site_pages_monthly", mode)),
            mode=check_mode(mode),
        ),
    )


def site_filter(f: DocFields, site: str, page: str | None, first: datetime, last: datetime) -> dict[str, Any]:
    """Filter on the (site, page, date) index: a site's (one page's) documents from ``first`` to ``last``."""
    flt: dict[str, Any] = {f"{f.metadata}.{f.site}": site}
    if page is not None:
        flt[f"{f.metadata}.{f.page}"] = page
    flt[f"{f.metadata}.{f.date}"] = {"$gte": first, "$lte": last}
    return flt


def indexes(mode: FieldMode) -> list[Index]:
    """Both hits collections: (site, page, date), as the seed prescribes, and (site, date).

    (site, page, date) serves a page's charts. A site's charts (all pages: the
    dashboard's default, the real-time chart, top pages, a site's properties) leave
    its page key open: MongoDB then walks every key of the site, all its pages and
    days, and the embedded store scans the collection. (site, date) reads exactly the
    site's documents of the range (docs/benchmarks.md: the site's real-time chart 478
    -> 42 ms). Metadata never changes after a document's insert, so either index costs
    one entry per document, written once, not one per counter update.
    """
    fields = hits_fields(mode)
    out = []
    for f in (fields.daily, fields.monthly):
        site, page, day = (
            (f"{f.metadata}.{f.site}", 1),
            (f"{f.metadata}.{f.page}", 1),
            (f"{f.metadata}.{f.date}", 1),
        )
        out += [
            Index(f.collection, (site, page, day), "site_page_date"),
            Index(f.collection, (site, day), "site_date"),
        ]
    rollups = fields.rollups
    for r in (rollups.daily, rollups.monthly, rollups.top_daily, rollups.top_monthly):
        keys = ((f"{r.metadata}.{r.site}", 1), (f"{r.metadata}.{r.date}", 1))
        out.append(Index(r.collection, keys, "site_date"))
    # the days with pages past the cap, newest first (preagg status)
    rd = fields.rollups.daily
    out.append(Index(rd.collection, ((rd.capped, 1), (f"{rd.metadata}.{rd.date}", -1)), "capped_date"))
    # a site's entry and exit pages over a range of days (preagg query visit-pages)
    vp = visit_pages_fields(mode)
    out.append(
        Index(vp.collection, ((f"{vp.metadata}.{vp.site}", 1), (f"{vp.metadata}.{vp.date}", 1)), "site_date")
    )
    return out


def shard_keys(mode: FieldMode) -> list[ShardKey]:
    """The seed's ``{site, page}``: a page's days and months on one shard, so a chart reads one shard.

    Writes of one busy page go to one shard too; its documents are few (one per day and
    month) and each flush writes each once.
    """
    fields = hits_fields(mode)
    vp = visit_pages_fields(mode)
    return [
        *(
            ShardKey(f.collection, ((f"{f.metadata}.{f.site}", 1), (f"{f.metadata}.{f.page}", 1)))
            for f in (fields.daily, fields.monthly, vp)
        ),
        # The visits stage's state is read and written by _id alone.
        hashed_id(visit_state_fields(mode).collection),
        # A site's rollups on one shard: a site chart is one targeted read of a few documents.
        *(
            ShardKey(r.collection, ((f"{r.metadata}.{r.site}", 1),))
            for r in (
                fields.rollups.daily,
                fields.rollups.monthly,
                fields.rollups.top_daily,
                fields.rollups.top_monthly,
            )
        ),
    ]
